"""The lifecycle shape the stack's managed nodes share (planner, arm, twin, cameras, executor, bridges).

One rule: configure creates (topics, timers, services, a model, a bus) and
keeps each ROS entity through `configured`; cleanup, shutdown and error run
the node's `_release` and then destroy those entities. `state_label` names
the state for diagnostics. Callbacks marked `serialized` never run while a
transition is under way.
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

from rclpy.action import ActionClient, ActionServer
from rclpy.client import Client
from rclpy.guard_condition import GuardCondition
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.timer import Timer

from .config import ConfigError
from .params import read_config, reject_undeclared

F = TypeVar("F", bound=Callable)
E = TypeVar("E")
C = TypeVar("C")


def serialized(method: F) -> F:
    """Run a node method under the node's `transition_lock`: a lifecycle node's timer tick never sees a half-released
    node; a plain node with a lock of that name (the controller, whose action futures call back outside its callback
    group) handles one callback at a time."""

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
        self._configured: list = []
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

    def read_parameters(self, config_class: type[C]) -> C | None:
        """Configure's first step: the validated `config_class` from the node's parameters (none undeclared); None,
        with `last_error` set and logged ("configure failed: <the parameter and why>"), when one is invalid."""
        try:
            cfg = read_config(self, config_class)
            reject_undeclared(self)
        except ConfigError as exc:
            self.last_error = f"configure failed: {exc}"
            self.get_logger().error(self.last_error)
            return None
        self.last_error = ""
        return cfg

    def configured(self, entity: E) -> E:
        """Keep a ROS entity configure created (publisher, subscription, timer, service, client, guard condition,
        action server or client); cleanup, shutdown and error destroy it. Returns it."""
        self._configured.append(entity)
        return entity

    def _destroy_configured(self) -> None:
        # Newest first; a timer is cancelled before it is destroyed so no tick starts on a half-released node. rclpy
        # defers freeing a handle another executor thread is waiting on, and wakes the executor after each destroy.
        while self._configured:
            entity = self._configured.pop()
            if isinstance(entity, Timer):
                entity.cancel()
                self.destroy_timer(entity)
            elif isinstance(entity, Publisher):
                self.destroy_lifecycle_publisher(entity)
            elif isinstance(entity, Subscription):
                self.destroy_subscription(entity)
            elif isinstance(entity, Service):
                self.destroy_service(entity)
            elif isinstance(entity, Client):
                self.destroy_client(entity)
            elif isinstance(entity, GuardCondition):
                self.destroy_guard_condition(entity)
            elif isinstance(entity, (ActionServer, ActionClient)):
                entity.destroy()
            else:
                raise TypeError(f"configured() does not know how to destroy a {type(entity).__name__}")

    def _release(self) -> None:
        """Free what configure acquired besides its ROS entities; safe to call twice and on a half-configured node."""
        raise NotImplementedError

    def _release_all(self) -> None:
        with self.transition_lock:
            try:
                self._release()
            finally:
                self._destroy_configured()

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release what configure acquired (see `_release`)."""
        self._release_all()
        self.state_label = "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition raised: release what it may have acquired and go back to unconfigured."""
        self._release_all()
        self.state_label = "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything, from any state."""
        self._release_all()
        self.state_label = "finalized"
        return TransitionCallbackReturn.SUCCESS
