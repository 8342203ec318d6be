"""The lifecycle shape the stack's managed nodes share (planner, arm, twin, cameras, executor).

Configure acquires (a model, a bus, a device), cleanup and shutdown both
release it through the node's `_release`, and `state_label` names the state
for diagnostics in every state. Activate and deactivate stay each node's own.
A transition may come from any thread (the lifecycle services, or a caller of
`trigger_*`); callbacks marked `serialized` never run while one is under way.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TypeVar

from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

F = TypeVar("F", bound=Callable)


def serialized(method: F) -> F:
    """Run a node method under the node's `transition_lock` (a timer tick never sees a half-released node)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.transition_lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class ReleasingLifecycleNode(LifecycleNode):
    """A LifecycleNode whose cleanup and shutdown release what configure acquired (`_release`)."""

    state_label = "unconfigured"  # unconfigured | inactive | active | finalized (the node sets the middle two)

    def __init__(self, *args, **kwargs) -> None:
        self.transition_lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def _release(self) -> None:
        """Free what configure acquired; safe to call twice and on a half-configured node."""
        raise NotImplementedError

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release what configure acquired (see `_release`)."""
        with self.transition_lock:
            self._release()
        self.state_label = "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything, from any state."""
        with self.transition_lock:
            self._release()
        self.state_label = "finalized"
        return TransitionCallbackReturn.SUCCESS
