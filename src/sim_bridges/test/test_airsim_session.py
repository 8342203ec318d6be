"""AirSimSession without ROS, against brace-airsim-peer through AirSim's real client: connecting at most every
reconnect_period_s, vehicles the settings lack, a lost link, a reconnect that reclaims and hovers the drones."""

from __future__ import annotations

from brace_common.counters import Counters
from brace_common.local_http import free_port
from sim_bridges.airsim.airsim_peer import AirSimPeer
from sim_bridges.airsim.airsim_session import COUNTS, AirSimSession, Connection
from sim_bridges.airsim.intersection import IntersectionConfig, settings
from sim_bridges.warehouse.warehouse_config import AirSimBridgeConfig


def session(port: int, **params) -> AirSimSession:
    cfg = AirSimBridgeConfig(port=port, num_agents=2, timeout_s=2.0, reconnect_period_s=5.0, gust_probability=0.0,
                             **params)
    cfg.validate()
    return AirSimSession(cfg, Counters(COUNTS))


def test_no_simulator_is_unreachable_and_the_next_try_waits_for_the_reconnect_period():
    s = session(free_port())
    try:
        assert s.connect(100.0, None) is Connection.UNREACHABLE and s.where in s.last_error and not s.up
        assert s.connect(104.9, None) is Connection.NOT_DUE
        health = s.health(active=True)
        assert health.values["connected"] is False and health.errors == (s.last_error,)
        assert not s.health(active=False).errors
    finally:
        s.close(None)


def test_a_simulator_without_the_scenarios_drones_is_refused_naming_them():
    port = free_port()
    with AirSimPeer(settings(IntersectionConfig(num_agents=1)), port=port):
        s = session(port)
        try:
            assert s.connect(0.0, None) is Connection.WRONG_VEHICLES and "drone_1" in s.last_error and not s.up
        finally:
            s.close(None)


def test_a_lost_link_is_counted_and_a_reconnect_reclaims_and_hovers_the_flying_drones():
    port = free_port()
    scenario = settings(IntersectionConfig(num_agents=2))
    with AirSimPeer(scenario, port=port) as peer:
        s = session(port)
        try:
            assert s.connect(0.0, None) is Connection.CONNECTED and s.up and s.version and peer.paused
            world = s.new_world(episode=1)
            assert sorted(world.drones) == ["drone_0", "drone_1"] and s.counts["reconnects"] == 0
            for _ in range(20):  # take off
                if all(d.landed_state != 0 for d in world.drones.values()):
                    break
                world.step()
            assert all(d.landed_state != 0 for d in world.drones.values())
            s.lost("simIsPause: gone", now=10.0)
            assert s.counts["link_losses"] == 1 and s.last_error.startswith("lost AirSim at")
            assert s.connect(14.0, world) is Connection.NOT_DUE
            hovers = peer.counts["hover"]
            assert s.connect(15.0, world) is Connection.CONNECTED and s.counts["reconnects"] == 1
            assert peer.counts["enableApiControl"] >= 2 and peer.counts["hover"] == hovers + 2
            assert not any(d.commanded for d in world.drones.values()) and s.last_error == ""
        finally:
            s.close(None)
