"""spin_node: the exit code of a node that fails to start, and of one shut down while it starts."""

from __future__ import annotations

import pytest
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from brace_common.spin import AUTOSTART, spin_node


class FailingStart(LifecycleNode):
    """A node whose configure fails; with `shut_down`, because its context went down meanwhile (what SIGINT or
    SIGTERM does to a node that is still loading its model)."""

    def __init__(self, shut_down: bool) -> None:
        super().__init__("failing_start")
        self.declare_parameter(AUTOSTART, True)
        self.shut_down = shut_down

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Fail (after shutting the context down when asked)."""
        if self.shut_down:
            self.context.try_shutdown()
        return TransitionCallbackReturn.FAILURE


@pytest.mark.parametrize("shut_down, code", [(False, 2), (True, 0)])
def test_a_failed_start_exits_2_unless_the_node_was_shut_down_meanwhile(shut_down, code):
    assert spin_node(lambda: FailingStart(shut_down), "failing_start", args=[]) == code
