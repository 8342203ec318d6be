"""The lifecycle shape the stack's managed nodes share (planner, arm, twin, cameras, executor).

Configure acquires (a model, a bus, a device), cleanup and shutdown both
release it through the node's `_release`, and `state_label` names the state
for diagnostics in every state. Activate and deactivate stay each node's own.
"""

from __future__ import annotations

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn


class ReleasingLifecycleNode(LifecycleNode):
    """A LifecycleNode whose cleanup and shutdown release what configure acquired (`_release`)."""

    state_label = "unconfigured"  # unconfigured | inactive | active | finalized (the node sets the middle two)

    def _release(self) -> None:
        """Free what configure acquired; safe to call twice and on a half-configured node."""
        raise NotImplementedError

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release what configure acquired (see `_release`)."""
        self._release()
        self.state_label = "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything, from any state."""
        self._release()
        self.state_label = "finalized"
        return TransitionCallbackReturn.SUCCESS
