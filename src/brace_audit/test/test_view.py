"""The viewer's mapping into Rerun, read back from the .rrd it writes: the scene, plans, events, latency against
SLO_t, the step timeline across episodes; bags (a damaged one shown as far as it reads); the viewer's server and the
control messages the browser test sends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import rerun as rr
from brace_msgs.msg import CollisionMonitorState, Episode, ExecutionOutcome, Plan, PlanStep, WorldInfo
from rclpy.serialization import serialize_message
from view_samples import S, call, column, decision, listening_addresses, read_rrd, state_msg, warehouse

from brace_audit.audit import main as audit_main
from brace_audit.audit_recorder_node import TOPICS, qos_profiles
from brace_audit.bag import BagWriter
from brace_audit.view_bag import bag_to_rrd
from brace_audit.view_browser import BrowserMissing, ViewerState, find_browser, parse_state, set_time_request, wire_fields
from brace_audit.view_mapping import ViewMapping, blueprint, short_label
from brace_audit.view_scene import GRAPH_COLUMNS, GRAPH_SPACING, graph_label, graph_positions
from brace_audit.view_server import ViewerServer
from brace_common import names
from brace_common.local_http import free_port
from brace_common.testing import wait_for
from brace_common.vocabulary import Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState


def mapped(tmp_path: Path, messages: list[tuple[str, object, int]]) -> tuple[ViewMapping, dict[str, list[dict]]]:
    rrd = tmp_path / "view.rrd"
    rec = rr.RecordingStream("brace_test", recording_id="test")
    rec.save(rrd, default_blueprint=blueprint())
    mapping = ViewMapping(rec)
    for topic, msg, t in messages:
        mapping.add(topic, msg, t)
    rec.flush()
    rec.disconnect()
    return mapping, read_rrd(rrd)


def test_the_scene_draws_every_entity_with_a_pose_and_the_agents_say_what_they_do(tmp_path):
    _, rows = mapped(tmp_path, [(names.WORLD_STATE, state_msg(warehouse(0)), S)])
    assert {"/world/robot/agent_0", "/world/robot/agent_1", "/world/shelf/shelf_0", "/world/dock/dock_0",
            "/world/object/cup_0", "/world/relations"} <= set(rows)
    labels = column(rows["/world/robot/agent_0"], "labels")
    assert labels == ["agent_0 move_to(shelf_0) 1/2"]
    assert column(rows["/world/robot/agent_1"], "labels") == ["agent_1 blocked BLOCKED"]
    near = column(rows["/world/relations"], "labels")
    assert near == ["agent_0 near agent_1 (5.0 m)"]
    assert set(column(rows["/scene_graph"], "node_ids")[0]) == {"agent_0", "agent_1", "shelf_0", "dock_0",
                                                                         "cup_0"}


def test_the_eye_sees_everything_drawn_from_above_and_the_south(tmp_path):
    mapping, _ = mapped(tmp_path, [(names.WORLD_STATE, state_msg(warehouse(0)), S)])
    assert mapping.eye() == ((2.5, 0.5, 3.5), (2.5, 4.0, 0.0))   # entities from (0, 2) to (5, 6): 5 m across
    assert not mapping.poseless()


def test_only_what_changed_is_logged_and_what_left_is_cleared(tmp_path):
    messages = [(names.WORLD_STATE, state_msg(warehouse(0)), S), (names.WORLD_STATE, state_msg(warehouse(1)), 2 * S),
                (names.WORLD_STATE, state_msg(warehouse(2, agent_at=(2.0, 2.0), with_cup=False)), 3 * S)]
    _, rows = mapped(tmp_path, messages)
    assert len(rows["/world/shelf/shelf_0"]) == 1                # never changed: logged once
    assert column(rows["/world/robot/agent_0"], "step") == [0, 2]   # logged where it moved
    assert column(rows["/world/object/cup_0"], "step") == [0, 2]    # drawn, then cleared when it left the state
    assert column(rows["/world/object/cup_0"], "is_recursive") == [False]


def test_a_plan_is_a_path_through_the_places_its_steps_name(tmp_path):
    plan = Plan(plan_id="p", agent_id="agent_0", step=0, decision_id="",
                steps=[PlanStep(action="move_to", parameters_json='{"target": "shelf_0"}'),
                       PlanStep(action="place", parameters_json='{"object": "cup_0", "target": "dock_0"}')])
    _, rows = mapped(tmp_path, [(names.WORLD_STATE, state_msg(warehouse(0)), S), (names.PLAN, plan, 2 * S),
                                (names.WORLD_STATE, state_msg(warehouse(1)), 3 * S)])
    strips = column(rows["/world/plans/agent_0"], "strips")
    assert strips == [[[1.0, 2.0, 0.0], [4.0, 2.0, 0.0], [0.0, 6.0, 0.0]]]
    assert len(rows["/world/plans/agent_0"]) == 1               # the next state leaves the plan where it is


def test_a_drone_plan_in_ned_is_drawn_in_the_state_frame(tmp_path):
    state = WorldState("airsim", 0, 0, (Entity("drone_0", "drone", pose=Pose(0, 0, 10)),),
                       agents=(AgentActivity("drone_0"),))
    plan = Plan(plan_id="p", agent_id="drone_0", steps=[
        PlanStep(action="move_to", parameters_json=json.dumps({"x": 40.0, "y": 3.0, "z": -10.0, "speed": 5.0}))])
    _, rows = mapped(tmp_path, [(names.WORLD_STATE, state_msg(state), S), (names.PLAN, plan, 2 * S)])
    assert column(rows["/world/plans/drone_0"], "strips") == [[[0.0, 0.0, 10.0], [3.0, 40.0, 10.0]]]


def test_events_say_why_and_the_latency_plot_holds_every_call_against_its_slo(tmp_path):
    info = WorldInfo(world="warehouse", agents=["agent_0", "agent_1"])
    messages = [(names.WORLD_INFO, info, S),
                (names.DECISIONS, decision(admitted=False, reason="cooldown", decision_id="d0"), 2 * S),
                (names.DECISIONS, decision(), 3 * S), (names.REPLAN_CALLS, call(), 4 * S),
                (names.REPLAN_CALLS, call(agent="agent_1", latency=6000.0, decision="d2"), 5 * S),
                (names.OUTCOMES, ExecutionOutcome(agent_id="agent_0", step=4, action="pick", success=False,
                                                  failure=ExecutionOutcome.FAILURE_GRASP, detail="closed on air"),
                 6 * S)]
    _, rows = mapped(tmp_path, messages)
    assert column(rows["/events/suppressed"], "text") == ["agent_0 hazard suppressed: cooldown"]
    assert column(rows["/events/suppressed"], "level") == ["DEBUG"]
    admitted = column(rows["/events/admitted"], "text")[0]
    assert "partial_replan" in admitted and "B_t 256" in admitted and "SLO_t 4500 ms" in admitted
    assert column(rows["/latency/agent_0"], "scalars") == [3000.0]
    assert column(rows["/latency/slo"], "scalars") == [4500.0, 4500.0]
    assert column(rows["/events/missed"], "level") == ["WARN"]
    assert "6000 ms, SLO_t 4500 ms MISSED" in column(rows["/events/missed"], "text")[0]
    assert column(rows["/phases/decode"], "scalars") == [900.0, 900.0]
    assert column(rows["/tokens/before"], "scalars") == [1800.0, 1800.0]
    assert column(rows["/events/failure"], "text") == ["agent_0 pick failed (grasp): closed on air"]
    story = column(rows["/story"], "text")[-1]
    assert "**call** c1" in story and "| decode | 900.0 |" in story
    styles = column(rows["/latency/agent_1"], "colors")     # the agent's own colour, static
    assert styles and column(rows["/latency/slo"], "names") == ["SLO_t"]


def test_the_step_timeline_runs_on_across_episodes(tmp_path):
    start = Episode(event=Episode.EVENT_START, episode=0, world="warehouse", num_agents=2, variant="v")
    messages = [(names.EPISODE, start, S), (names.WORLD_STATE, state_msg(warehouse(0)), S),
                (names.WORLD_STATE, state_msg(warehouse(7, agent_at=(3.0, 3.0))), 2 * S),
                (names.EPISODE, Episode(event=Episode.EVENT_END, episode=0, steps=7), 3 * S),
                (names.EPISODE, Episode(event=Episode.EVENT_START, episode=1), 4 * S),
                (names.WORLD_STATE, state_msg(warehouse(2, agent_at=(1.0, 1.0))), 5 * S)]
    mapping, rows = mapped(tmp_path, messages)
    assert column(rows["/world/robot/agent_0"], "step") == [0, 7, 10]   # episode 1's step 2 is 8 + 2
    assert mapping.last_step == mapping.logged_to == 10
    texts = column(rows["/events/episode"], "text")
    assert texts[0].startswith("episode 0 started") and texts[1].startswith("episode 0 ended")


def test_the_monitor_is_drawn_while_it_holds_an_agent_and_said_once(tmp_path):
    stop = CollisionMonitorState(agent_id="agent_0", action=CollisionMonitorState.ACTION_STOP, obstacle="agent_1",
                                 distance_m=0.4, speed_ratio=0.0, detail="closing on agent_1")
    clear = CollisionMonitorState(agent_id="agent_0", action=CollisionMonitorState.ACTION_NONE,
                                  distance_m=float("nan"), speed_ratio=1.0)
    messages = [(names.WORLD_STATE, state_msg(warehouse(0)), S), (names.COLLISION_MONITOR_STATE, stop, 2 * S),
                (names.COLLISION_MONITOR_STATE, stop, 3 * S), (names.COLLISION_MONITOR_STATE, clear, 4 * S)]
    _, rows = mapped(tmp_path, messages)
    assert column(rows["/events/monitor"], "text") == ["agent_0 stop for agent_1: closing on agent_1"]
    assert len(rows["/world/monitor/agent_0"]) == 2              # the line, then its clear


def test_a_malformed_message_is_counted_and_skipped(tmp_path):
    bad = state_msg(warehouse(0))
    bad.entities[1].id = "agent_0"                                # a repeated id
    mapping, rows = mapped(tmp_path, [(names.WORLD_STATE, bad, S), (names.REPLAN_CALLS, call(), 2 * S)])
    assert mapping.counts[f"rejected.{names.WORLD_STATE}"] == 1 and mapping.shown == 1
    assert mapping.health().warnings == (f"rejected.{names.WORLD_STATE}",)
    assert "/world/robot/agent_0" not in rows and "/latency/agent_0" in rows


def test_a_world_without_poses_is_its_scene_graph(tmp_path):
    state = WorldState("textworld", 0, 0, (Entity("player", "agent"), Entity("kitchen", "room"),
                                           Entity("apple", "object", "in_fridge")),
                       (Relation("player", Predicate.AT, "kitchen"),), (AgentActivity("player"),))
    mapping, rows = mapped(tmp_path, [(names.WORLD_STATE, state_msg(state), S)])
    assert not [p for p in rows if p.startswith("/world/") and p.count("/") == 3]
    assert mapping.poseless() and mapping.eye() is None     # the layout puts the scene graph's tab in front
    assert column(rows["/scene_graph"], "labels") == [["player", "kitchen", "apple: in_fridge"]]
    assert column(rows["/scene_graph"], "edges") == [{"first": "player", "second": "kitchen"}]


def test_the_scene_graph_has_a_fixed_layout_a_column_per_place():
    rooms = [Entity(f"room_{i}", "room") for i in range(GRAPH_COLUMNS + 1)]
    things = (Entity("player", "agent"), Entity("fridge", "container"), Entity("apple", "food", "raw, cuttable, uncut"),
              Entity("recipe", "recipe"))
    state = WorldState("textworld", 0, 0, (*rooms, *things),
                       (Relation("player", Predicate.AT, "room_1"), Relation("fridge", Predicate.AT, "room_1"),
                        Relation("apple", Predicate.IN, "fridge")), (AgentActivity("player"),))
    positions = graph_positions(state)
    dx, dy = GRAPH_SPACING
    assert positions[1] == (dx, 0.0)                                          # room_1, then what is at or in it
    assert positions[-4:-1] == [(dx, dy), (dx, 2 * dy), (dx, 3 * dy)]
    assert positions[0] == (0.0, 0.0) and positions[GRAPH_COLUMNS - 1] == ((GRAPH_COLUMNS - 1) * dx, 0.0)
    band = 5 * dy                                         # the tallest column (room_1 and three things) and a gap
    assert positions[GRAPH_COLUMNS] == (0.0, band)        # the sixth room begins the second band
    assert positions[-1] == (dx, band)                    # the rest: the last column
    assert len(set(positions)) == len(positions) and graph_positions(state) == positions
    assert graph_label(things[2]) == "apple: raw, cuttable, ..." and graph_label(things[3]) == "recipe"


def test_short_labels_name_the_entities_a_step_names():
    assert short_label("move_to", '{"target": "shelf_2"}') == "move_to(shelf_2)"
    assert short_label("move_to", '{"x": 1.0, "y": 2.0}') == "move_to"
    assert short_label("pick", "not json") == "pick"


def write_bag(path: Path, n_calls: int = 400) -> None:
    writer = BagWriter(path, chunk_size=4096)
    for topic in (names.WORLD_STATE, names.REPLAN_CALLS, names.EPISODE):
        type_name, profile = TOPICS[topic]
        writer.add_topic(f"/brace/{topic}", type_name, qos_profiles(profile))
    writer.write("/brace/episode", serialize_message(Episode(event=Episode.EVENT_START)), S)
    writer.write("/brace/world_state", serialize_message(state_msg(warehouse(0))), S + 1)
    for i in range(n_calls):
        writer.write("/brace/replan_calls", serialize_message(call(step=i, latency=1000.0 + i)), 2 * S + i * 1000)
    writer.write("/brace/replan_calls", b"\x00\x01\x02", 3 * S)     # not a ReplanCall
    writer.close()


def test_a_bag_becomes_a_recording_beside_it(tmp_path):
    write_bag(tmp_path / "run" / "brace_erecap" / "bag")
    view = bag_to_rrd(tmp_path / "run" / "brace_erecap" / "bag")
    assert view.rrd == tmp_path / "run" / "brace_erecap" / "bag.rrd" and view.rrd.is_file()
    assert (view.shown, view.skipped, view.damage, view.last_step) == (402, 1, "", 399)
    rows = read_rrd(view.rrd)
    assert len(column(rows["/latency/agent_0"], "scalars")) == 400
    assert column(rows["/world/robot/agent_0"], "ros_time") == [S + 1]   # at the bag's log time


def test_a_damaged_bag_is_shown_as_far_as_it_reads_and_says_so(tmp_path, capsys):
    bag = tmp_path / "bag"
    write_bag(bag)
    mcap = next(bag.glob("*.mcap"))
    mcap.write_bytes(mcap.read_bytes()[: mcap.stat().st_size * 2 // 3])   # a recorder killed mid-write
    assert audit_main(["view", str(bag), "--no-serve"]) == 1
    out, err = capsys.readouterr()
    assert "wrote " in out and "shown as far as it reads" in err
    rows = read_rrd(tmp_path / "bag.rrd")
    calls = column(rows["/latency/agent_0"], "scalars")
    assert 0 < len(calls) < 400
    said = column(rows["/events/bag"], "text")
    assert len(said) == 1 and "damaged" in said[0] and column(rows["/events/bag"], "level") == ["ERROR"]


def test_the_viewer_serves_on_loopback_only(tmp_path):
    grpc, web = free_port(), free_port()
    with ViewerServer(grpc, web) as server:
        assert listening_addresses(web) == {"127.0.0.1"} and listening_addresses(grpc) == {"127.0.0.1"}
        assert server.url == (f"http://127.0.0.1:{web}/?url=rerun%2Bhttp%3A%2F%2F127.0.0.1%3A{grpc}%2Fproxy")
        process = server.process
    assert process.poll() is not None                                  # stopped with the context


def test_the_set_time_request_is_the_protobuf_the_viewer_reads():
    request = set_time_request("step", 30)
    (number, inner), = wire_fields(request)
    assert number == 6                                                # ViewerControlRequest.set_time_cursor
    fields = dict(wire_fields(inner))
    assert wire_fields(fields[2]) == [(1, b"step")] and wire_fields(fields[3]) == [(1, 30)] and fields[5] == 1


def test_the_viewer_state_is_read_from_its_protobuf():
    timeline = b"\n\x06\n\x04step\x10\x01\x1a\x02\x10\x3c"           # step, sequence, range max 60
    cursor = b"\n\x06\n\x04step\x10\x01\x1a\x02\x08\x1e"              # the cursor at step 30
    recording = b"\n\x04rec1" + b"\x12" + bytes([len(timeline)]) + timeline + b"\x1a" + bytes([len(cursor)]) + cursor \
        + b"\x28\x01"
    state = parse_state(b"\x12\x04rec1\x1a" + bytes([len(recording)]) + recording)
    assert isinstance(state, ViewerState) and state.active == "rec1" and state.loading == 0
    rec = state.recordings["rec1"]
    assert rec.ranges == {"step": (0, 60)} and rec.cursor == ("step", 30) and rec.play_state == 1


def test_a_missing_browser_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("BRACE_BROWSER", str(tmp_path / "nothing"))
    with pytest.raises(BrowserMissing, match="BRACE_BROWSER"):
        find_browser()
    monkeypatch.delenv("BRACE_BROWSER")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserMissing, match="apt-get install chromium"):
        find_browser()


def test_an_id_with_a_space_or_a_slash_is_one_path_part(tmp_path):
    state = WorldState("pickfruit", 0, 0, (Entity("arm", "arm", pose=Pose(0.1, 0, 0.2)),
                                           Entity("red apple/1", "fruit", "on_table", Pose(0.3, 0, 0))),
                       agents=(AgentActivity("arm"),))
    _, rows = mapped(tmp_path, [(names.WORLD_STATE, state_msg(state), S)])
    fruit = [p for p in rows if p.startswith("/world/fruit/")]
    assert fruit == ["/world/fruit/red\\ apple\\/1"], fruit      # escaped: one part, not /red apple/1


def test_the_viewer_server_stops_when_what_started_it_is_killed():
    """A SIGKILLed brace-run or brace-audit leaves no server holding the viewer's ports."""
    code = ("from brace_audit.view_server import ViewerServer\nfrom brace_common.local_http import free_port\n"
            "s = ViewerServer(free_port(), free_port()).wait()\nprint(s.process.pid, flush=True)\n"
            "import time\ntime.sleep(120)\n")
    starter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    server = int(starter.stdout.readline())
    starter.kill()
    starter.wait()

    def ended() -> bool:
        try:
            return "State:\tZ" in Path(f"/proc/{server}/status").read_text()   # exited (init reaps it later)
        except FileNotFoundError:
            return True
    wait_for(ended, 30.0, "the viewer server to end with its parent")
