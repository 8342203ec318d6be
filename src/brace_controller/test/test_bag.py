"""rosbag2 MCAP bags: round trip, third-party reader, damage reporting, recorder on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from brace_msgs.msg import Episode, ReplanCall
from rclpy.serialization import deserialize_message, serialize_message

from brace_controller.bag import BagError, BagWriter, message_definition, read_bag


def write_calls(path, n: int = 50, chunk_size: int = 64 * 1024):
    from brace_common import qos
    from brace_controller.audit_recorder_node import qos_profiles

    writer = BagWriter(path, chunk_size=chunk_size)
    writer.add_topic("/brace/replan_calls", "brace_msgs/msg/ReplanCall", qos_profiles(qos.EVENTS))  # real QoS
    writer.add_topic("/brace/episode", "brace_msgs/msg/Episode", qos_profiles(qos.PLANS))
    for i in range(n):
        writer.write("/brace/replan_calls", serialize_message(ReplanCall(call_id=f"c{i}", latency_ms=float(i))),
                     1_000_000_000 + i * 1000)
    writer.write("/brace/episode", serialize_message(Episode(event=1, success=True)), 1_000_000_000 + n * 1000)
    writer.close()
    return writer


def test_round_trip_and_metadata(tmp_path):
    write_calls(tmp_path / "bag")
    contents = read_bag(tmp_path / "bag")
    assert contents.damage is None and len(contents.messages) == 51
    calls = [deserialize_message(m.data, ReplanCall) for m in contents.of("/brace/replan_calls")]
    assert [c.call_id for c in calls] == [f"c{i}" for i in range(50)]
    info = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["storage_identifier"] == "mcap" and info["message_count"] == 51
    counts = {t["topic_metadata"]["name"]: t["message_count"] for t in info["topics_with_message_count"]}
    assert counts == {"/brace/replan_calls": 50, "/brace/episode": 1}


def test_rosbags_reads_the_bag(tmp_path):
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    write_calls(tmp_path / "bag")
    store = get_typestore(Stores.EMPTY)
    with Reader(tmp_path / "bag") as reader:
        assert {c.topic: c.msgcount for c in reader.connections} == {"/brace/replan_calls": 50, "/brace/episode": 1}
        conn = next(c for c in reader.connections if c.topic == "/brace/replan_calls")
        types = {}
        for i, part in enumerate(message_definition("brace_msgs/msg/ReplanCall").split("=" * 80)):
            name = "brace_msgs/msg/ReplanCall" if i == 0 else part.strip().splitlines()[0].split()[1]
            body = part if i == 0 else "\n".join(part.strip().splitlines()[1:])
            types.update(get_types_from_msg(body, name if "/msg/" in name else name.replace("/", "/msg/")))
        store.register(types)
        first = next(reader.messages(connections=[conn]))
        msg = store.deserialize_cdr(first[2], conn.msgtype)
        assert msg.call_id == "c0"
        (profile,) = conn.ext.offered_qos_profiles  # the full profile, as rosbag2 writes it
        assert (profile.depth, profile.reliability.name, profile.durability.name) == (200, "RELIABLE", "VOLATILE")


def test_the_mcap_library_reads_the_bag(tmp_path):
    from mcap.reader import make_reader

    write_calls(tmp_path / "bag")
    with open(next((tmp_path / "bag").glob("*.mcap")), "rb") as f:
        reader = make_reader(f)
        topics = [channel.topic for _schema, channel, _message in reader.iter_messages()]
        assert topics.count("/brace/replan_calls") == 50 and reader.get_summary().statistics.message_count == 51


def test_a_damaged_chunk_is_skipped_and_reading_goes_on(tmp_path):
    write_calls(tmp_path / "bag", n=2000, chunk_size=4096)
    mcap = next((tmp_path / "bag").glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    data[len(data) // 3] ^= 0xFF  # one flipped byte inside a chunk in the first half
    mcap.write_bytes(bytes(data))
    contents = read_bag(tmp_path / "bag")
    assert contents.damage is not None and contents.damage.skipped_chunks == 1
    ids = [deserialize_message(m.data, ReplanCall).call_id for m in contents.of("/brace/replan_calls")]
    assert 1800 < len(ids) < 2000 and ids[-1] == "c1999"  # only the damaged chunk's messages are lost
    assert "damaged chunks skipped" in str(contents.damage)


def test_a_recorder_that_dies_leaves_a_bag_that_opens(tmp_path):
    from brace_common import qos
    from brace_controller.audit_recorder_node import qos_profiles

    writer = BagWriter(tmp_path / "bag", chunk_size=1024)
    writer.add_topic("/brace/episode", "brace_msgs/msg/Episode", qos_profiles(qos.EVENTS))
    for i in range(200):
        writer.write("/brace/episode", serialize_message(Episode(episode=i)), 1_000 + i)
    writer.write_metadata()  # what the recorder does every metadata_period_s; then it is killed (no close())
    info = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["message_count"] == 200
    contents = read_bag(tmp_path / "bag")
    episodes = [deserialize_message(m.data, Episode).episode for m in contents.messages]
    assert episodes == list(range(len(episodes))) and len(episodes) >= 200 - 1024 // 40  # at most a chunk lost


def test_brace_audit_never_raises_and_says_what_it_read(tmp_path, capsys):
    import random

    from brace_controller.audit import EXIT_INTACT, EXIT_RECOVERED, EXIT_UNREADABLE, main

    write_calls(tmp_path / "bag", n=300, chunk_size=2048)
    assert main(["report", str(tmp_path / "bag")]) == EXIT_INTACT
    mcap = next((tmp_path / "bag").glob("*.mcap"))
    original = mcap.read_bytes()
    rng = random.Random(0)
    codes = set()
    for i in range(300):  # random truncations and corruptions: never a traceback, the exit code says what happened
        data = bytearray(original)
        if i % 2:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(3):
                data[rng.randrange(len(data))] = rng.randrange(256)
        mcap.write_bytes(bytes(data))
        code = main(["report", str(tmp_path / "bag")])
        assert code in (EXIT_INTACT, EXIT_RECOVERED, EXIT_UNREADABLE)
        codes.add(code)
    assert {EXIT_RECOVERED, EXIT_UNREADABLE} <= codes
    capsys.readouterr()


def test_truncated_bag_reports_what_was_recovered(tmp_path):
    write_calls(tmp_path / "bag", n=2000)
    mcap = next((tmp_path / "bag").glob("*.mcap"))
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 2])
    contents = read_bag(tmp_path / "bag")
    assert contents.damage is not None
    assert 0 < contents.damage.recovered == len(contents.messages) < 2001
    assert "recovered" in str(contents.damage)


def test_not_a_bag(tmp_path):
    with pytest.raises(BagError):
        read_bag(tmp_path / "missing")
    with pytest.raises(BagError):
        BagWriter(tmp_path).add_topic("/x", "no_such_pkg/msg/Nothing")


def test_recorder_refuses_a_used_output_dir_by_name(tmp_path):
    import rclpy
    from rclpy.parameter import Parameter

    from brace_common.config import ConfigError
    from brace_controller.audit_recorder_node import AuditRecorderNode

    (tmp_path / "old.mcap").write_bytes(b"x")
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        with pytest.raises(ConfigError, match="output_dir"):
            AuditRecorderNode(context=context, parameter_overrides=[Parameter("output_dir", value=str(tmp_path))])
    finally:
        context.try_shutdown()  # destroys the half-made node: must not raise
    assert (tmp_path / "old.mcap").read_bytes() == b"x"


def test_recorder_finishes_the_bag_on_sigterm(tmp_path):
    bag = tmp_path / "rec"
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "brace_controller.audit_recorder_node", "--ros-args",
                             "-p", f"output_dir:={bag}", "-p", "topics:=['episode']", "-r", "__ns:=/brace"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    import rclpy

    from brace_common import qos
    try:
        with rclpy.init():
            node = rclpy.create_node("bag_test_publisher")
            pub = node.create_publisher(Episode, "/brace/episode", qos.EVENTS)
            deadline = time.monotonic() + 30
            while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert pub.get_subscription_count() == 1
            for i in range(20):
                pub.publish(Episode(episode=i))
                time.sleep(0.01)
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.kill()
    contents = read_bag(bag)
    assert contents.damage is None
    assert [deserialize_message(m.data, Episode).episode for m in contents.messages] == list(range(20))
    assert {m.topic for m in contents.messages} == {"/brace/episode"}  # the relative name, resolved in its namespace
    assert (bag / "metadata.yaml").is_file()


def test_a_plan_with_parameters_nested_thousands_deep_is_compared_as_text():
    from brace_msgs.msg import Plan, PlanStep

    from brace_controller.convert import plan_signature

    deep = "[" * 100_000 + "]" * 100_000  # json.loads raised RecursionError in the audit report before
    plan = Plan(steps=[PlanStep(action="move_to", parameters_json=deep), PlanStep(action="wait",
                                                                                   parameters_json='{"b": 1, "a": 2}')])
    signature = plan_signature(plan)
    assert signature[0] == ("move_to", deep) and signature[1] == ("wait", '{"a": 2, "b": 1}')
