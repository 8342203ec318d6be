"""ReleasingLifecycleNode: cleanup and shutdown release what configure acquired and name the state."""

from __future__ import annotations

from rclpy.lifecycle import TransitionCallbackReturn

from brace_common.lifecycle import ReleasingLifecycleNode


class Holder(ReleasingLifecycleNode):
    def __init__(self) -> None:
        super().__init__("holder")
        self.released = 0

    def on_configure(self, state) -> TransitionCallbackReturn:
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        self.released += 1


def test_cleanup_and_shutdown_release_and_name_the_state(ros):
    node = Holder()
    node.trigger_configure()
    assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    assert (node.released, node.state_label) == (1, "unconfigured")
    node.trigger_configure()
    assert node.trigger_shutdown() == TransitionCallbackReturn.SUCCESS
    assert (node.released, node.state_label) == (2, "finalized")
    node.destroy_node()


class Broken(Holder):
    def on_configure(self, state) -> TransitionCallbackReturn:
        self.state_label = "inactive"
        raise RuntimeError("the bus vanished half-way")


def test_a_transition_that_raises_says_why_releases_and_can_be_retried(ros):
    node = Broken()
    assert node.trigger_configure() != TransitionCallbackReturn.SUCCESS
    assert node.last_error == "on_configure raised RuntimeError: the bus vanished half-way"
    assert (node.released, node.state_label) == (1, "unconfigured")  # on_error released the half-configured node
    assert node._state_machine.current_state[1] == "unconfigured"
    assert node.trigger_configure() != TransitionCallbackReturn.SUCCESS  # a manager may try again
    node.destroy_node()


def test_autostart_reports_the_cause_of_a_configure_that_raised(ros):
    from brace_common.spin import autostart

    node = Broken()
    assert autostart(node) == "on_configure raised RuntimeError: the bus vanished half-way"
    node.destroy_node()
