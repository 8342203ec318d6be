"""Test helper: the real piper_sdk interface connected to a python-can bus, and disconnected without leftovers.

piper_sdk 0.6.2 keeps one interface per CAN name for the whole process (a singleton), and its DisconnectPort()
stops its reader thread without joining it and leaves its CAN-monitor and FPS-counter threads running (daemon
threads). `close_sdk` also stops and joins those (through the interface's private attributes: test hygiene
only, the SDK is otherwise used as is) and forgets the singleton, so no test leaves threads or state behind.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager

from piper_sdk import C_PiperInterface_V2

_names = itertools.count()


def unique_port(prefix: str) -> str:
    """A CAN channel name no other test (or process) uses."""
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def close_sdk(piper: C_PiperInterface_V2, can_name: str) -> None:
    """Disconnect the SDK and stop every thread it started."""
    piper.DisconnectPort()
    private = "_C_PiperInterface_V2__"
    monitor_stop = getattr(piper, private + "can_monitor_stop_event", None)
    if monitor_stop is not None:
        monitor_stop.set()
    fps = getattr(piper, private + "fps_counter", None)
    if fps is not None:
        fps.stop()
    for name in ("can_deal_th", "can_monitor_th"):
        thread = getattr(piper, private + name, None)
        if thread is not None:
            thread.join(timeout=5.0)
            assert not thread.is_alive(), f"piper_sdk's {name} thread did not stop"
    C_PiperInterface_V2._instances.pop(can_name, None)


@contextmanager
def sdk_session(can_name: str, interface: str = "virtual") -> Iterator[C_PiperInterface_V2]:
    """The SDK as the arm node uses it: can_auto_init=False, CreateCanBus(can_name, bustype), ConnectPort()."""
    piper = C_PiperInterface_V2(can_name=can_name, judge_flag=False, can_auto_init=False)
    piper.CreateCanBus(can_name, bustype=interface)
    piper.ConnectPort()
    try:
        yield piper
    finally:
        close_sdk(piper, can_name)
