"""The msgpack-rpc client against our server: calls in flight answered by msgid, errors, a lost connection, and the
server's fallback for methods it has no handler for (a proxy's forwarding)."""

from __future__ import annotations

import threading

import pytest

from brace_common.msgpack_rpc import Deferred, MsgpackRpcClient, MsgpackRpcServer, RpcError
from brace_common.testing import wait_for


@pytest.fixture
def served():
    """served(handlers, fallback) -> (a started server, a client connected to it); both closed afterwards."""
    opened = []

    def make(handlers, fallback=None):
        server = MsgpackRpcServer(handlers, port=0, fallback=fallback)
        server.start()
        client = MsgpackRpcClient("127.0.0.1", server.port, 5.0)
        opened.append((server, client))
        return server, client

    yield make
    for server, client in opened:
        client.close()
        server.stop()


def test_a_slow_call_in_flight_does_not_hold_up_later_ones(served):
    slow = Deferred()
    _, client = served({"slow": lambda: slow, "add": lambda a, b: a + b})
    pending = client.call("slow")
    assert client.call_sync("add", 2, 3) == 5 and not pending.done
    slow.resolve("late")
    wait_for(lambda: pending.done, what="the slow call answered")
    assert pending.outcome == (None, "late")


def test_a_servers_error_is_raised_and_a_silent_call_times_out(served):
    _, client = served({"bad": lambda: (_ for _ in ()).throw(RpcError("no such vehicle")), "never": Deferred})
    with pytest.raises(RpcError, match="no such vehicle"):
        client.call_sync("bad")
    with pytest.raises(TimeoutError, match="never"):
        client.call_sync("never", timeout_s=0.2)


def test_a_lost_connection_fails_every_call_in_flight(served):
    server, client = served({"hang": Deferred})
    pending = [client.call("hang") for _ in range(3)]
    server.stop()
    wait_for(lambda: all(p.done for p in pending), what="the calls failed")
    assert all("connection lost" in p.outcome[0] for p in pending) and client.closed
    assert client.call("hang").outcome[0].endswith("not connected")


def test_the_fallback_serves_every_method_without_a_handler(served):
    seen = []
    forwarded = threading.Event()

    def fallback(method, params):
        seen.append((method, params))
        forwarded.set()
        return f"{method}:{len(params)}"

    _, client = served({"own": lambda: "mine"}, fallback)
    assert client.call_sync("own") == "mine"
    assert client.call_sync("simGetVehiclePose", "drone_0") == "simGetVehiclePose:1"
    assert seen == [("simGetVehiclePose", ["drone_0"])]
