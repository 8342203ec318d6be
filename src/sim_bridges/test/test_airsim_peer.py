"""Contract test: the unmodified AirSim Python client (cosysairsim) against the AirSim peer.

Every call goes through the client's own method; each test pins the request the peer
received (method name and params exactly as the client sends them) and checks the
reply decoded into the client's types. Simulated time is paused and advanced with
simContinueForTime, so nothing depends on the wall clock beyond generous timeouts.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest

from brace_common.msgpack_rpc import Deferred, MsgpackRpcServer, RpcError
from sim_bridges.airsim.airsim_peer import AirSimPeer, load_settings, main, parse_settings

airsim = pytest.importorskip("cosysairsim")
RPCError = pytest.importorskip("msgpackrpc.error").RPCError

YAW = {"is_rate": True, "yaw_or_rate": 0.0}   # the client's default YawMode() on the wire
NO_TIMEOUT = 3e38                              # the client's default timeout_sec of move calls
SETTINGS = {"SettingsVersion": 2.0, "SimMode": "Multirotor", "ClockSpeed": 1.0,
            "Vehicles": {"drone_0": {"VehicleType": "SimpleFlight", "X": 0, "Y": 0, "Z": 0},
                         "drone_1": {"VehicleType": "SimpleFlight", "X": 0, "Y": 4, "Z": 0}}}


@pytest.fixture
def peer():
    with AirSimPeer(SETTINGS) as running:
        yield running


def make_client(port: int):
    return airsim.MultirotorClient(ip="127.0.0.1", port=port, timeout_value=10)


def close_client(client) -> None:
    # VehicleClient has no close(): close the msgpackrpc session and its 1 s timeout callback on this thread's loop.
    client.client.close()
    client.client._loop.dettach_periodic_callback()


@pytest.fixture
def client(peer):
    """A client of `peer` with simulated time paused."""
    c = make_client(peer.port)
    c.simPause(True)
    yield c
    close_client(c)


def last(peer: AirSimPeer, method: str) -> list:
    """The params of the latest `method` request the peer received."""
    return [params for name, params in peer.received if name == method][-1]


def fly(client, name: str = "drone_0") -> None:
    client.enableApiControl(True, name)
    assert client.armDisarm(True, name) is True
    takeoff = client.takeoffAsync(vehicle_name=name)
    client.simContinueForTime(5.0)
    assert takeoff.get() is True


def position(client, name: str = "drone_0") -> tuple:
    p = client.simGetVehiclePose(name).position
    return p.x_val, p.y_val, p.z_val


# ---------------------------------------------------------------------- connection, settings, control


def test_confirm_connection_is_happy_with_the_versions(peer, capsys):
    c = make_client(peer.port)
    try:
        c.confirmConnection()
    finally:
        close_client(c)
    out = capsys.readouterr()
    assert "Connected!" in out.out and "Server Ver:4 (Min Req: 4)" in out.out
    assert "upgrade" not in (out.out + out.err).lower()
    assert peer.received == [("ping", []), ("getServerVersion", []), ("getMinRequiredClientVersion", [])]


def test_list_vehicles_and_settings_string(peer, client):
    assert client.listVehicles() == ["drone_0", "drone_1"]
    assert json.loads(client.getSettingsString()) == SETTINGS
    assert last(peer, "listVehicles") == [] and last(peer, "getSettingsString") == []


def test_api_control_and_arming(peer, client):
    assert client.isApiControlEnabled("drone_1") is False
    assert client.enableApiControl(True, "drone_1") is None
    assert last(peer, "enableApiControl") == [True, "drone_1"]
    assert client.isApiControlEnabled("drone_1") is True
    assert last(peer, "isApiControlEnabled") == ["drone_1"]
    assert client.isApiControlEnabled() is False  # '' is the first vehicle, drone_0
    assert last(peer, "isApiControlEnabled") == [""]
    assert client.armDisarm(True, "drone_1") is True
    assert last(peer, "armDisarm") == [True, "drone_1"]
    fly(client, "drone_1")
    assert client.armDisarm(False, "drone_1") is False  # not in the air
    client.landAsync(vehicle_name="drone_1")
    client.simContinueForTime(6.0)
    assert client.armDisarm(False, "drone_1") is True


def test_motion_without_api_control_or_arming_is_an_error_and_the_peer_keeps_serving(peer, client):
    with pytest.raises(RPCError, match="drone_0' is not under API control"):
        client.takeoffAsync().get()
    with pytest.raises(RPCError, match="not under API control"):
        client.armDisarm(True)
    client.enableApiControl(True)
    with pytest.raises(RPCError, match="moveToPosition: vehicle 'drone_0' is not armed"):
        client.moveToPositionAsync(1, 0, -3, 1).get()
    future = client.hoverAsync()
    assert future.join() is None and "not armed" in future.error  # join() neither returns nor raises
    assert client.ping() is True
    assert peer.counts["errors"] == 4


def test_an_unknown_vehicle_is_an_error_naming_it(peer, client):
    with pytest.raises(RPCError, match="unknown vehicle 'ghost' \\(vehicles: drone_0, drone_1\\)"):
        client.getMultirotorState("ghost")
    with pytest.raises(RPCError, match="unknown vehicle 'ghost'"):
        client.enableApiControl(True, "ghost")
    assert client.ping() is True


def test_unknown_method_and_wrong_arguments_are_errors(peer, client):
    with pytest.raises(RPCError, match="unknown method 'simFlyToTheMoon'"):
        client.client.call("simFlyToTheMoon", 1)
    with pytest.raises(RPCError, match="'ping' called with 2 arguments"):
        client.client.call("ping", 1, 2)
    with pytest.raises(RPCError, match="wind must be a Vector3r"):
        client.client.call("simSetWind", "east")
    assert client.ping() is True
    assert peer.counts["simFlyToTheMoon"] == 1 and peer.counts["errors"] == 3


# ---------------------------------------------------------------------- motion


def test_takeoff_replies_true_when_at_height_and_state_decodes(peer, client):
    client.enableApiControl(True)
    client.armDisarm(True)
    before = client.getMultirotorState()
    assert before.landed_state == airsim.LandedState.Landed
    takeoff = client.takeoffAsync()
    client.simContinueForTime(1.0)
    assert last(peer, "takeoff") == [20, ""]
    assert takeoff.result is None  # still climbing
    client.simContinueForTime(4.0)
    assert takeoff.get() is True
    state = client.getMultirotorState()
    assert last(peer, "getMultirotorState") == [""]
    assert isinstance(state, airsim.MultirotorState)
    assert state.timestamp - before.timestamp == 5_000_000_000
    assert state.landed_state == airsim.LandedState.Flying
    assert state.ready is True and state.can_arm is True and state.ready_message == ""
    kin = state.kinematics_estimated
    assert isinstance(kin, airsim.KinematicsState)
    assert isinstance(kin.position, airsim.Vector3r) and isinstance(kin.orientation, airsim.Quaternionr)
    assert kin.position.z_val == pytest.approx(-3.0, abs=0.2)
    assert (kin.orientation.w_val, kin.orientation.x_val) == (1.0, 0.0)
    assert isinstance(kin.linear_velocity, airsim.Vector3r) and isinstance(kin.angular_acceleration, airsim.Vector3r)
    assert isinstance(state.collision, airsim.CollisionInfo) and state.collision.has_collided is False
    assert isinstance(state.gps_location, airsim.GeoPoint)
    assert state.gps_location.altitude == pytest.approx(122.0 - kin.position.z_val)
    assert isinstance(state.rc_data, airsim.RCData) and state.rc_data.is_valid is False


def test_move_to_position_replies_true_when_reached(peer, client):
    fly(client)
    move = client.moveToPositionAsync(5, 2, -4, 2)
    client.simContinueForTime(1.0)
    assert last(peer, "moveToPosition") == [5, 2, -4, 2, NO_TIMEOUT, 0, YAW, -1, 1, ""]
    assert move.result is None
    client.simContinueForTime(5.0)
    assert move.join() is None and move.result is True  # join() returns nothing: get() gives the reply
    assert move.get() is True
    assert position(client) == pytest.approx((5, 2, -4), abs=0.2)
    assert last(peer, "simGetVehiclePose") == ["drone_0"]


def test_a_preempted_move_replies_false_even_from_another_client(peer, client):
    fly(client)
    first = client.moveToPositionAsync(30, 0, -3, 3, vehicle_name="drone_0")
    client.simContinueForTime(1.0)
    other = make_client(peer.port)
    try:
        second = other.moveToPositionAsync(0, 0, -5, 3, vehicle_name="drone_0")
        other.ping()  # sends the move (a msgpackrpc client only writes while its loop runs)
        assert first.get() is False
        assert second.result is None
        client.simContinueForTime(5.0)
        assert second.get() is True
    finally:
        close_client(other)


def test_a_move_past_its_timeout_replies_false(peer, client):
    fly(client)
    move = client.moveToPositionAsync(100, 0, -3, 1, timeout_sec=2)
    client.simContinueForTime(2.5)
    assert last(peer, "moveToPosition") == [100, 0, -3, 1, 2, 0, YAW, -1, 1, ""]
    assert move.get() is False
    x, _, _ = position(client)
    assert 1.0 < x < 3.0  # stopped where the timeout found it, far from x = 100


def test_move_to_z(peer, client):
    fly(client)
    move = client.moveToZAsync(-6, 2, vehicle_name="drone_0")
    client.simContinueForTime(3.0)
    assert last(peer, "moveToZ") == [-6, 2, NO_TIMEOUT, YAW, -1, 1, "drone_0"]
    assert move.get() is True
    assert position(client) == pytest.approx((0, 0, -6), abs=0.2)


def test_move_by_velocity_and_by_velocity_z(peer, client):
    fly(client)
    move = client.moveByVelocityAsync(1, 0, 0, 2)
    client.simContinueForTime(2.5)
    assert last(peer, "moveByVelocity") == [1, 0, 0, 2, airsim.DrivetrainType.MaxDegreeOfFreedom, YAW, ""]
    assert move.get() is True
    assert 1.4 < position(client)[0] < 2.0
    move = client.moveByVelocityZAsync(0, 1, -5, 3)
    client.simContinueForTime(3.5)
    assert last(peer, "moveByVelocityZ") == [0, 1, -5, 3, 0, YAW, ""]
    assert move.get() is True
    _, y, z = position(client)
    assert 2.4 < y < 3.0 and z == pytest.approx(-5.0, abs=0.2)
    kin = client.simGetGroundTruthKinematics()
    assert last(peer, "simGetGroundTruthKinematics") == [""]
    assert isinstance(kin, airsim.KinematicsState) and kin.position.y_val == pytest.approx(y)


def test_hover_replies_true_at_once_and_preempts(peer, client):
    fly(client)
    move = client.moveToPositionAsync(30, 0, -3, 3)
    client.simContinueForTime(1.0)
    assert client.hoverAsync().get() is True  # no simulated time passes
    assert last(peer, "hover") == [""]
    assert move.get() is False
    held = position(client)
    client.simContinueForTime(3.0)
    assert position(client)[0] == pytest.approx(held[0], abs=1.5)


def test_cancel_last_task_fails_the_pending_move_and_hovers(peer, client):
    fly(client)
    move = client.moveToPositionAsync(30, 0, -3, 3)
    client.simContinueForTime(1.0)
    client.cancelLastTask()
    assert last(peer, "cancelLastTask") == [""]
    assert move.get() is False
    assert peer.model.state("drone_0").mode.value == "hovering"


def test_land_replies_true_on_the_ground(peer, client):
    fly(client)
    land = client.landAsync()
    client.simContinueForTime(5.0)
    assert last(peer, "land") == [60, ""]
    assert land.get() is True
    assert client.getMultirotorState().landed_state == airsim.LandedState.Landed
    assert position(client)[2] == 0.0


def test_positions_are_in_each_vehicles_local_frame(peer, client):
    fly(client, "drone_0")
    fly(client, "drone_1")
    moves = [client.moveToPositionAsync(2, 0, -3, 2, vehicle_name=name) for name in ("drone_0", "drone_1")]
    client.simContinueForTime(4.0)
    assert [m.get() for m in moves] == [True, True]
    assert position(client, "drone_0") == pytest.approx(position(client, "drone_1"), abs=0.01)
    world = [peer.model.state(name).world_position for name in ("drone_0", "drone_1")]
    assert world[1].y - world[0].y == pytest.approx(4.0, abs=0.02)
    home0, home1 = client.getHomeGeoPoint("drone_0"), client.getHomeGeoPoint("drone_1")
    assert last(peer, "getHomeGeoPoint") == ["drone_1"]
    assert isinstance(home0, airsim.GeoPoint)
    assert (home0.latitude, home0.longitude, home0.altitude) == (47.641468, -122.140165, 122.0)
    assert home1.latitude == home0.latitude and home1.longitude > home0.longitude  # 4 m east


def test_wind_pushes_a_hovering_vehicle(peer, client):
    fly(client)
    client.simSetWind(airsim.Vector3r(0, 12, 0))
    assert last(peer, "simSetWind") == [{"x_val": 0, "y_val": 12, "z_val": 0}]
    client.simContinueForTime(3.0)
    assert position(client)[1] > 1.0
    client.simSetWind(airsim.Vector3r(0, 0, 0))
    client.simContinueForTime(10.0)
    assert position(client)[1] == pytest.approx(0.0, abs=0.1)


def test_reset_lands_everything_at_spawn_and_fails_pending_moves(peer, client):
    fly(client)
    move = client.moveToPositionAsync(30, 0, -3, 3)
    client.simSetWind(airsim.Vector3r(1, 0, 0))
    client.simContinueForTime(1.0)
    client.reset()
    assert last(peer, "reset") == []
    assert move.get() is False
    assert client.isApiControlEnabled() is False
    state = client.getMultirotorState()
    assert state.landed_state == airsim.LandedState.Landed
    assert position(client) == (0.0, 0.0, 0.0)
    assert peer.model.wind.norm() == 0.0
    assert client.simIsPause() is True  # reset leaves the clock alone
    with pytest.raises(RPCError, match="not under API control"):
        client.takeoffAsync().get()


# ---------------------------------------------------------------------- time


def test_pause_and_continue_for_time_advance_exactly(peer, client):
    assert client.simIsPause() is True
    assert last(peer, "simPause") == [True] and last(peer, "simIsPaused") == []
    t0 = client.getMultirotorState().timestamp
    time.sleep(0.05)
    assert client.getMultirotorState().timestamp == t0  # frozen
    client.simContinueForTime(1.25)
    assert last(peer, "simContinueForTime") == [1.25]
    assert client.getMultirotorState().timestamp - t0 == 1_250_000_000
    client.simContinueForTime(0.5)
    assert client.getMultirotorState().timestamp - t0 == 1_750_000_000
    assert client.simIsPause() is True
    client.simPause(False)
    assert client.simIsPause() is False
    deadline = time.monotonic() + 10.0
    while client.getMultirotorState().timestamp - t0 == 1_750_000_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.getMultirotorState().timestamp - t0 > 1_750_000_000


def test_unpaused_time_runs_at_most_at_clock_speed():
    settings = {**SETTINGS, "ClockSpeed": 5.0}
    with AirSimPeer(settings) as peer:
        wall0, sim0 = time.monotonic(), peer.sim_time
        deadline = wall0 + 10.0
        while peer.sim_time - sim0 < 1.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        simulated, wall = peer.sim_time - sim0, time.monotonic() - wall0
    assert simulated >= 1.0
    assert simulated <= 5.0 * wall + 0.02


# ---------------------------------------------------------------------- wire robustness


def raw_connection(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    return sock


def raw_reply(sock: socket.socket) -> list:
    unpacker = msgpack.Unpacker(raw=False)
    while True:
        data = sock.recv(65536)
        assert data, "connection closed before a reply"
        unpacker.feed(data)
        for message in unpacker:
            return message


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_malformed_frames_are_handled_without_killing_the_server(peer, client):
    bad_bytes = raw_connection(peer.port)
    bad_bytes.sendall(b"\xc1")  # a byte msgpack never uses
    assert closed(bad_bytes)
    not_a_message = raw_connection(peer.port)
    not_a_message.sendall(msgpack.packb({"hello": "airsim"}))
    assert closed(not_a_message)
    sock = raw_connection(peer.port)
    sock.sendall(msgpack.packb([0, 7, "ping", "not an array"]))
    assert raw_reply(sock) == [1, 7, "params of 'ping' must be an array, got str", None]
    sock.sendall(msgpack.packb([0, 8, 42, []]))
    assert raw_reply(sock)[:2] == [1, 8]
    sock.sendall(msgpack.packb([0, 9, "ping", []]))
    assert raw_reply(sock) == [1, 9, None, True]
    sock.sendall(msgpack.packb([2, "simPause", [False]]))  # a notification: no reply, but it acts
    sock.sendall(msgpack.packb([0, 10, "simIsPaused", []]))
    assert raw_reply(sock) == [1, 10, None, False]
    for s in (bad_bytes, not_a_message, sock):
        s.close()
    assert client.ping() is True
    assert peer.counts["malformed"] == 4


def test_handler_exceptions_and_deferred_replies_at_the_server_level():
    gate = Deferred()

    def broken() -> None:
        raise ZeroDivisionError("division by zero")

    def refused() -> None:
        raise RpcError("not now")

    server = MsgpackRpcServer({"broken": broken, "refused": refused, "slow": lambda: gate, "echo": lambda x: x})
    server.start()
    try:
        sock = raw_connection(server.port)
        sock.sendall(msgpack.packb([0, 1, "broken", []]))
        assert raw_reply(sock) == [1, 1, "'broken' failed: ZeroDivisionError: division by zero", None]
        sock.sendall(msgpack.packb([0, 2, "refused", []]))
        assert raw_reply(sock) == [1, 2, "not now", None]
        # A deferred reply does not hold up the calls after it on the same connection.
        sock.sendall(msgpack.packb([0, 3, "slow", []]) + msgpack.packb([0, 4, "echo", [b"\x00bin"]]))
        assert raw_reply(sock) == [1, 4, None, b"\x00bin"]
        threading.Thread(target=gate.resolve, args=("late",)).start()
        assert raw_reply(sock) == [1, 3, None, "late"]
        assert gate.resolve("twice") is False
        assert server.counts["errors"] == 2 and server.counts["slow"] == 1
        sock.close()
    finally:
        server.stop()
    assert not server.running


def test_stop_closes_connections_and_joins_threads():
    peer = AirSimPeer(SETTINGS).start()
    port = peer.port
    c = make_client(port)
    try:
        assert c.ping() is True
        sock = raw_connection(port)
        peer.stop()
        assert closed(sock)
        sock.close()
        assert not [t for t in threading.enumerate() if t.name.startswith("airsim-peer")]
        with AirSimPeer(SETTINGS, port=port) as again:  # the port is free again
            assert again.port == port
    finally:
        close_client(c)


# ---------------------------------------------------------------------- settings and CLI


def test_settings_are_validated_with_errors_that_name_the_problem(tmp_path):
    assert parse_settings(SETTINGS).vehicles == {"drone_0": (0.0, 0.0, 0.0), "drone_1": (0.0, 4.0, 0.0)}
    assert list(parse_settings({"SimMode": "Multirotor"}).vehicles) == ["SimpleFlight"]  # AirSim's default
    cases = [({**SETTINGS, "SimMode": "Car"}, "SimMode"),
             ({**SETTINGS, "ClockSpeed": 0}, "ClockSpeed"),
             ({**SETTINGS, "Vehicles": {}}, "Vehicles"),
             ({**SETTINGS, "Vehicles": {"d": {"VehicleType": "PhysXCar"}}}, "Vehicles.d.VehicleType"),
             ({**SETTINGS, "Vehicles": {"d": {"VehicleType": "SimpleFlight", "X": "far"}}}, "Vehicles.d.X")]
    for settings, named in cases:
        with pytest.raises(ValueError, match=named):
            parse_settings(settings)
    with pytest.raises(ValueError, match="cannot read"):
        load_settings(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{ not json")
    with pytest.raises(ValueError, match="broken.json: not JSON"):
        load_settings(tmp_path / "broken.json")
    (tmp_path / "ok.json").write_text(json.dumps(SETTINGS))
    assert load_settings(tmp_path / "ok.json") == SETTINGS


def test_cli_rejects_bad_settings_with_exit_code_2(tmp_path, capsys):
    path = tmp_path / "car.json"
    path.write_text(json.dumps({**SETTINGS, "SimMode": "Car"}))
    assert main(["--settings", str(path)]) == 2
    assert "SimMode" in capsys.readouterr().err


def test_cli_serves_until_sigterm(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(SETTINGS))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-m", "sim_bridges.airsim.airsim_peer", "--settings", str(path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30.0)
        assert ready, "the CLI printed nothing in 30 s"
        line = proc.stdout.readline().strip()
        assert line.startswith("airsim peer on 127.0.0.1:") and line.endswith("vehicles: drone_0, drone_1")
        port = int(line.split(":")[1].split(",")[0])
        c = make_client(port)
        try:
            assert c.ping() is True
        finally:
            close_client(c)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_counters_are_declared_a_misspelt_method_is_a_key_error():
    server = MsgpackRpcServer({"echo": lambda x: x})
    assert server.counts["echo"] == 0 and server.counts["errors"] == 0 and server.counts["connections"] == 0
    with pytest.raises(KeyError, match="undeclared counter 'ehco'"):
        server.counts["ehco"]
    with pytest.raises(KeyError):
        server.count("eros")
    assert AirSimPeer(SETTINGS).counts["moveToPosition"] == 0  # every served method is declared up front
