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
import traceback
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
    """A LifecycleNode whose cleanup, shutdown and error processing release what configure acquired (`_release`),
    and whose failed transitions say why (`last_error`)."""

    state_label = "unconfigured"  # unconfigured | inactive | active | finalized (the node sets the middle two)
    last_error = ""  # why the latest transition failed (the node's own words, or the exception one raised)

    def __init__(self, *args, **kwargs) -> None:
        self.transition_lock = threading.RLock()
        super().__init__(*args, **kwargs)
        # rclpy turns an exception in a transition callback into ERROR without a word (its callbacks table is the
        # one place every transition passes): each is wrapped once here so the cause is logged and kept.
        self._callbacks = {state: self._reporting(callback) for state, callback in self._callbacks.items()}

    def _reporting(self, callback: Callable[[LifecycleState], TransitionCallbackReturn]):
        @functools.wraps(callback)
        def transition(state: LifecycleState) -> TransitionCallbackReturn:
            try:
                return callback(state)
            except Exception as exc:  # noqa: BLE001 - rclpy's own rule (ERROR), with the cause said
                self.last_error = f"{callback.__name__} raised {type(exc).__name__}: {exc}"
                self.get_logger().error(f"{self.last_error}\n{traceback.format_exc()}")
                return TransitionCallbackReturn.ERROR

        return transition

    def _release(self) -> None:
        """Free what configure acquired; safe to call twice and on a half-configured node."""
        raise NotImplementedError

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release what configure acquired (see `_release`)."""
        with self.transition_lock:
            self._release()
        self.state_label = "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition raised: release what it may have acquired and go back to unconfigured."""
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
