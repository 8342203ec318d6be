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
