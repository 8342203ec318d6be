"""rosbag2 MCAP bags: round trip, third-party readers, damage reporting, recorder on SIGTERM and SIGKILL, recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from brace_msgs.msg import Episode, Plan, PlanStep, ReplanCall, WorldState
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import deserialize_message, serialize_message

from brace_audit.audit import EXIT_INTACT, audit_bag, print_integrity
from brace_audit.audit_recorder_node import AuditRecorderNode, RecorderConfig
from brace_audit.bag import BagError, BagWriter, message_definition, read_bag, recover_bag
from brace_common import names, qos
from brace_common.convert import plan_signature
from brace_common.testing import wait_for
from brace_common.world_io import TOPICS as WORLD_TOPICS
from brace_common.world_state import Entity, world_state_from_msg, world_state_msg
from brace_common.world_state import WorldState as State


def write_calls(path, n: int = 50, chunk_size: int = 64 * 1024):
    from brace_audit.audit_recorder_node import qos_profiles
    from brace_common import qos

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
    from brace_audit.audit_recorder_node import qos_profiles
    from brace_common import qos

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


def test_writes_metadata_and_close_from_several_threads_at_once_leave_a_whole_bag(tmp_path):
    # brace-run closes the bag from its main thread while the recorder's metadata timer and subscriptions run on
    # executor threads: two metadata writes at once lost metadata.yaml.partial to each other (FileNotFoundError)
    import threading

    from brace_audit.audit_recorder_node import qos_profiles

    writer = BagWriter(tmp_path / "bag", chunk_size=1024)
    writer.add_topic("/brace/episode", "brace_msgs/msg/Episode", qos_profiles(qos.EVENTS))
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def guarded(work):
        def run():
            go.wait()
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - the test reports any
                errors.append(exc)
        return threading.Thread(target=run)

    written = []

    def messages():
        for i in range(2000):
            if writer.write("/brace/episode", serialize_message(Episode(episode=i)), 1_000 + i):
                written.append(i)

    def metadata():
        for _ in range(200):
            writer.write_metadata()

    threads = [guarded(messages), guarded(metadata), guarded(metadata), guarded(lambda: (time.sleep(0.01), writer.close()))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert writer.closed and not writer.write("/brace/episode", serialize_message(Episode(episode=99_999)), 5_000)
    contents = read_bag(tmp_path / "bag")
    assert contents.damage is None
    assert [deserialize_message(m.data, Episode).episode for m in contents.messages] == written
    info = yaml.safe_load((tmp_path / "bag" / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["message_count"] == len(written)


def test_brace_audit_never_raises_and_says_what_it_read(tmp_path, capsys):
    import random

    from brace_audit.audit import EXIT_INTACT, EXIT_RECOVERED, EXIT_UNREADABLE, main

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
        assert code != EXIT_INTACT or not i % 2  # a cut file has no end magic: never intact (it was at a record end)
        codes.add(code)
        if i % 10 == 1 and code == EXIT_RECOVERED:  # every recovered truncation opens in the mcap library
            from mcap.reader import make_reader

            out = tmp_path / f"recovered_{i}"
            assert main(["recover", str(tmp_path / "bag"), "--output", str(out)]) == 0
            with open(out / f"{out.name}_0.mcap", "rb") as f:
                assert sum(1 for _ in make_reader(f).iter_messages()) == len(read_bag(tmp_path / "bag").messages)
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

    from brace_audit.audit_recorder_node import AuditRecorderNode
    from brace_common.config import ConfigError

    (tmp_path / "old.mcap").write_bytes(b"x")
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        with pytest.raises(ConfigError, match="output_dir"):
            AuditRecorderNode(context=context, parameter_overrides=[Parameter("output_dir", value=str(tmp_path))])
    finally:
        context.try_shutdown()  # destroys the half-made node: must not raise
    assert (tmp_path / "old.mcap").read_bytes() == b"x"


def start_recorder(bag, topics: str = "['episode']", *params: str) -> subprocess.Popen:
    """The audit_recorder as its own process in /brace, recording `topics` into `bag`; `params`: 'name:=value'."""
    args = [a for p in params for a in ("-p", p)]
    return subprocess.Popen([sys.executable, "-m", "brace_audit.audit_recorder_node", "--ros-args",
                             "-p", f"output_dir:={bag}", "-p", f"topics:={topics}", *args, "-r", "__ns:=/brace"],
                            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def metadata_count(bag) -> int:
    """The message count of a bag's metadata.yaml (-1 while there is none or it cannot be read)."""
    try:
        return int(yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]["message_count"])
    except (OSError, TypeError, KeyError, yaml.YAMLError):
        return -1


def test_recorder_finishes_the_bag_on_sigterm(tmp_path):
    bag = tmp_path / "rec"
    proc = start_recorder(bag)
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
            # in the recorder's reader, maybe not yet taken by its spin: the stop writes them all the same
            assert pub.wait_for_all_acked(Duration(seconds=30))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stdout.read().decode(errors="replace")
    contents = read_bag(bag)
    assert contents.damage is None, log
    assert [deserialize_message(m.data, Episode).episode for m in contents.messages] == list(range(20)), log
    assert {m.topic for m in contents.messages} == {"/brace/episode"}  # the relative name, resolved in its namespace
    assert (bag / "metadata.yaml").is_file()


def test_a_plan_with_parameters_nested_thousands_deep_is_compared_as_text():
    from brace_msgs.msg import Plan, PlanStep

    from brace_common.convert import plan_signature

    deep = "[" * 100_000 + "]" * 100_000  # json.loads raised RecursionError in the audit report before
    plan = Plan(steps=[PlanStep(action="move_to", parameters_json=deep), PlanStep(action="wait",
                                                                                   parameters_json='{"b": 1, "a": 2}')])
    signature = plan_signature(plan)
    assert signature[0] == ("move_to", deep) and signature[1] == ("wait", '{"a": 2, "b": 1}')


def third_party_reads(bag) -> dict:
    """What rosbags (rosbag2 Reader + CDR deserialisation) and the mcap library (seeking and streaming readers,
    summary) read of a bag: messages per reader, and the call ids rosbags deserialised."""
    from mcap.reader import NonSeekingReader, make_reader
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    (mcap,) = bag.glob("*.mcap")
    with open(mcap, "rb") as f:
        seeking = make_reader(f)
        summary = seeking.get_summary()
        seek_count = sum(1 for _ in seeking.iter_messages())
    with open(mcap, "rb") as f:
        stream_count = sum(1 for _ in NonSeekingReader(f).iter_messages())
    store, call_ids, rosbags_count = get_typestore(Stores.EMPTY), [], 0
    with Reader(bag) as reader:
        for conn in reader.connections:
            store.register(get_types_from_msg(conn.msgdef.data, conn.msgtype))
        for conn, _time, raw in reader.messages():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            rosbags_count += 1
            if conn.topic.endswith("replan_calls"):
                call_ids.append(msg.call_id)
        rosbags_total = reader.message_count
    return {"seeking": seek_count, "summary": summary.statistics.message_count, "streaming": stream_count,
            "rosbags": rosbags_count, "rosbags_metadata": rosbags_total, "call_ids": call_ids}


def test_a_killed_recorder_bag_is_reported_damaged_and_recovered_for_every_reader(tmp_path, capsys):
    """SIGKILL mid-episode: `report` exits 1 naming the cut episode (it exited 0 with the episode silently short);
    `recover` writes a bag that rosbags and mcap read whole, whose report still names the episode incomplete."""
    import rclpy

    from brace_audit.audit import EXIT_RECOVERED, main
    from brace_common import qos

    bag, out = tmp_path / "rec", tmp_path / "recovered"
    proc = start_recorder(bag, "['episode', 'replan_calls']", "chunk_kb:=1", "metadata_period_s:=0.2")
    sent: list[str] = []
    try:
        with rclpy.init():
            node = rclpy.create_node("bag_kill_publisher")
            episodes = node.create_publisher(Episode, "/brace/episode", qos.EVENTS)
            calls = node.create_publisher(ReplanCall, "/brace/replan_calls", qos.EVENTS)
            wait_for(lambda: episodes.get_subscription_count() == 1 and calls.get_subscription_count() == 1, 30,
                     "the recorder's subscriptions")

            def episode(number: int, calls_in_it: int, end: bool) -> None:
                episodes.publish(Episode(event=Episode.EVENT_START, episode=number))
                wait_for(lambda: metadata_count(bag) == len(sent) + 1, 30, f"episode {number}'s start recorded")
                sent.append(f"start {number}")
                for i in range(calls_in_it):
                    call_id = f"e{number}c{i}"
                    calls.publish(ReplanCall(call_id=call_id, compressor="x" * 100))  # 8 calls to a 1 KiB chunk
                    sent.append(call_id)
                wait_for(lambda: metadata_count(bag) == len(sent), 30, f"episode {number}'s calls recorded")
                if end:
                    episodes.publish(Episode(event=Episode.EVENT_END, episode=number, success=True))
                    sent.append(f"end {number}")
                    wait_for(lambda: metadata_count(bag) == len(sent), 30, f"episode {number}'s end recorded")

            episode(0, 20, end=True)
            episode(1, 21, end=False)  # metadata.yaml counts every message: the recorder wrote them all out
            proc.kill()
            assert proc.wait(timeout=30) == -signal.SIGKILL
            node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.kill()
    original = (bag / f"{bag.name}_0.mcap").read_bytes()
    capsys.readouterr()
    assert main(["report", str(bag)]) == EXIT_RECOVERED
    err = capsys.readouterr().err
    assert "did not finish the file" in err and "episode 1 incomplete" in err and "21 calls" in err, err
    assert "episode 0 incomplete" not in err
    contents = read_bag(bag)
    assert len(contents.messages) == len(sent) and contents.damage is not None and not contents.damage.finished

    assert main(["recover", str(bag), "--output", str(out)]) == 0
    assert (bag / f"{bag.name}_0.mcap").read_bytes() == original  # the damaged bag is left as it was
    calls_sent = [c for c in sent if " " not in c]  # the call ids, not the episode boundaries
    reads = third_party_reads(out)
    assert reads.pop("call_ids") == calls_sent
    assert reads == dict.fromkeys(("seeking", "summary", "streaming", "rosbags", "rosbags_metadata"), len(sent))
    recovered = read_bag(out)
    assert recovered.damage is None and len(recovered.messages) == len(sent)
    info = yaml.safe_load((out / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["files"][0]["path"] == "recovered_0.mcap" and info["files"][0]["message_count"] == len(sent)
    capsys.readouterr()
    assert main(["report", str(out)]) == EXIT_RECOVERED  # valid file, but episode 1's end was never recorded
    err = capsys.readouterr().err
    assert "recovered by brace-audit recover" in err and "episode 1 incomplete" in err, err
    assert main(["recover", str(bag), "--output", str(out)]) == 2  # never over an existing bag


def test_a_killed_recorder_keeps_every_message_written_out_before_the_kill(tmp_path):
    """The chunk in progress is written out every metadata_period_s (before: only when it held chunk_kb, so a quiet
    topic's messages stayed in memory and a SIGKILL lost all of them)."""
    import rclpy

    from brace_common import qos

    bag = tmp_path / "rec"
    proc = start_recorder(bag, "['episode']", "metadata_period_s:=0.2")  # chunk_kb 64: 20 messages never fill one
    try:
        with rclpy.init():
            node = rclpy.create_node("bag_quiet_publisher")
            pub = node.create_publisher(Episode, "/brace/episode", qos.EVENTS)
            wait_for(lambda: pub.get_subscription_count() == 1, 30, "the recorder's subscription")
            for i in range(20):
                pub.publish(Episode(episode=i))
            wait_for(lambda: metadata_count(bag) == 20, 30, "metadata.yaml counting every message")
            proc.kill()
            proc.wait(timeout=30)
            node.destroy_node()
    finally:
        if proc.poll() is None:
            proc.kill()
    contents = read_bag(bag)
    assert [deserialize_message(m.data, Episode).episode for m in contents.messages] == list(range(20))
    assert contents.damage is not None and not contents.damage.finished and not contents.damage.lost_data


def killed_bag(path, episodes_ended: bool, n: int = 40):
    """A bag as a recorder killed after its last write_metadata() leaves it: an episode, its calls, maybe its end."""
    from brace_audit.audit_recorder_node import qos_profiles
    from brace_common import qos

    writer = BagWriter(path, chunk_size=1024)
    writer.add_topic("/brace/episode", "brace_msgs/msg/Episode", qos_profiles(qos.EVENTS))
    writer.add_topic("/brace/replan_calls", "brace_msgs/msg/ReplanCall", qos_profiles(qos.EVENTS))
    writer.write("/brace/episode", serialize_message(Episode(event=Episode.EVENT_START, episode=0)), 1_000)
    for i in range(n):
        writer.write("/brace/replan_calls", serialize_message(ReplanCall(call_id=f"c{i}")), 2_000 + i)
    if episodes_ended:
        writer.write("/brace/episode", serialize_message(Episode(event=Episode.EVENT_END, episode=0)), 9_000)
    writer.write_metadata()  # then SIGKILL: no close()
    return writer


def test_an_unfinished_bag_is_damaged_even_when_every_record_is_intact(tmp_path, capsys):
    from brace_audit.audit import EXIT_INTACT, EXIT_RECOVERED, main

    killed_bag(tmp_path / "bag", episodes_ended=True)
    contents = read_bag(tmp_path / "bag")
    assert len(contents.messages) == 42 and contents.damage is not None
    assert not contents.damage.finished and contents.damage.lost_bytes == 0 and contents.damage.skipped_chunks == 0
    assert main(["report", str(tmp_path / "bag")]) == EXIT_RECOVERED
    assert "did not finish the file" in capsys.readouterr().err
    # Recovered, the file is whole and every episode complete: intact, with a note saying it was recovered.
    assert main(["recover", str(tmp_path / "bag")]) == 0
    assert main(["report", str(tmp_path / "bag_recovered")]) == EXIT_INTACT
    err = capsys.readouterr().err
    assert "NOTE" in err and "recovered by brace-audit recover" in err and "WARNING" not in err, err
    assert main(["recover", str(tmp_path / "bag_recovered")]) == 0  # intact: nothing to do, nothing written
    assert not (tmp_path / "bag_recovered_recovered").exists()


def test_a_bag_cut_inside_a_chunk_says_what_was_lost(tmp_path, capsys):
    from brace_audit.audit import EXIT_RECOVERED, main

    killed_bag(tmp_path / "bag", episodes_ended=True, n=300)
    mcap = tmp_path / "bag" / "bag_0.mcap"
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) - 700])  # the file ends inside its last chunk
    damage = read_bag(tmp_path / "bag").damage
    assert damage is not None and damage.cut_record == "chunk" and damage.lost_bytes > 0 and damage.lost_data
    assert damage.expected == 302 and 0 < damage.missing < 302
    assert main(["report", str(tmp_path / "bag")]) == EXIT_RECOVERED
    err = capsys.readouterr().err
    assert f"{damage.lost_bytes} bytes after the last intact record" in err and "cut inside a chunk" in err
    assert f"metadata.yaml counts 302: {damage.missing} of them missing" in err
    assert "episode 0 incomplete" in err  # its end was in the lost chunk
    result = recover_bag(tmp_path / "bag")
    assert result.messages == 302 - damage.missing and read_bag(result.output).damage is None
    assert main(["report", str(result.output)]) == EXIT_RECOVERED  # a recovery that lost messages stays damaged
    assert "episode 0 incomplete" in capsys.readouterr().err


def test_recover_in_place_replaces_the_bag_and_keeps_the_damaged_file(tmp_path):
    from rosbags.rosbag2 import Reader

    killed_bag(tmp_path / "bag", episodes_ended=False)
    mcap = tmp_path / "bag" / "bag_0.mcap"
    original = mcap.read_bytes()
    result = recover_bag(tmp_path / "bag", in_place=True)
    assert result.output == tmp_path / "bag" and result.kept_original == tmp_path / "bag" / "bag_0.mcap.damaged"
    assert result.kept_original.read_bytes() == original
    assert read_bag(tmp_path / "bag").damage is None
    with Reader(tmp_path / "bag") as reader:
        assert reader.message_count == 41 and sum(1 for _ in reader.messages()) == 41
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bag"]  # no temporary folder left behind
    with pytest.raises(BagError, match="exists"):
        recover_bag(tmp_path / "bag", in_place=True)  # would overwrite the kept damaged file


def test_the_recorder_records_the_world_state_by_default(tmp_path, ros):
    bag = tmp_path / "rec"
    recorder = ros.add(AuditRecorderNode(namespace=names.DEFAULT_NAMESPACE,
                                         parameter_overrides=[Parameter("output_dir", value=str(bag))]))
    assert names.WORLD_STATE in recorder.config.topics
    world = ros.add(Node("world_state_publisher"))
    pub = world.create_publisher(WorldState, f"{names.DEFAULT_NAMESPACE}/{names.WORLD_STATE}", qos.WORLD_STATE)
    states = [State("warehouse", 0, step, (Entity("agent_0", "robot", "", None, {"step": str(step)}),))
              for step in range(3)]
    for state in states:  # latched: recorded even when published before the recorder matched
        pub.publish(world_state_msg(state, world.get_clock().now().to_msg(), "map"))
    wait_for(lambda: recorder.writer.topics["/brace/world_state"].count == 3, what="the states recorded")
    recorder.close()
    contents = read_bag(bag)
    assert [world_state_from_msg(deserialize_message(m.data, WorldState)) for m in contents.messages] == states


def test_a_stopping_recorder_writes_what_arrived_before_it_was_spun(tmp_path):
    import rclpy

    bag = tmp_path / "rec"
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        recorder = AuditRecorderNode(context=context, namespace=names.DEFAULT_NAMESPACE,
                                     parameter_overrides=[Parameter("output_dir", value=str(bag)),
                                                          Parameter("topics", value=[names.EPISODE])])
        world = Node("episode_publisher", context=context)
        pub = world.create_publisher(Episode, f"{names.DEFAULT_NAMESPACE}/{names.EPISODE}", qos.EVENTS)
        wait_for(lambda: pub.get_subscription_count() == 1, what="the recorder matched")
        for i in range(5):
            pub.publish(Episode(episode=i))
        assert pub.wait_for_all_acked(Duration(seconds=30))  # in the recorder's reader; the recorder never spun
        recorder.finish()
        world.destroy_node()
        recorder.destroy_node()
    finally:
        context.try_shutdown()
    assert [deserialize_message(m.data, Episode).episode for m in read_bag(bag).messages] == list(range(5))


def test_the_recorder_records_every_topic_of_the_stack_by_default():
    stack = {name for _, name, _ in WORLD_TOPICS.values()} - {names.DIAGNOSTICS}
    stack |= {names.TRIGGERS, names.DECISIONS, names.REPLAN_CALLS, names.PLAN, names.VERDICTS, names.CONTROLLER_STATE,
              names.SERVER_LOAD}
    assert names.WORLD_INFO in stack and stack <= set(RecorderConfig().topics)


def test_a_bag_recorded_before_a_field_was_added_reads_with_the_definition_it_holds(tmp_path, capsys):
    plan = Plan(plan_id="p1", agent_id="arm_0", decision_id="d1",
                steps=[PlanStep(index=0, action="pick", parameters_json='{"object": "apple"}')])
    # A bag of before held Plan up to its steps, and steps without `composite` (each a bool, the step's last byte):
    # trigger_kind and the ReCAP fields after it came later. Marked, trigger_kind shows where they begin.
    # CDR alignment padding is whatever the buffer held (it may hold a marker byte too): trigger_kind is where two
    # markers show, and the bytes before it are the same message's.
    data = serialize_message(plan)
    marked = [serialize_message(Plan(plan_id="p1", agent_id="arm_0", decision_id="d1", steps=plan.steps,
                                     trigger_kind=marker)) for marker in (0x5A, 0xA5)]
    cut = next(i for i in range(len(data)) if (marked[0][i], marked[1][i]) == (0x5A, 0xA5))
    assert data[cut] == 0 and data[cut - 1] == 0   # trigger_kind's default, and the one step's composite: False
    recorded = data[:cut - 1]
    definition = message_definition("brace_msgs/msg/Plan")
    later = ("uint8 trigger_kind", "string thought", "PlanStep[] subtasks", "uint32 depth", "uint8 recap_need",
             "uint8 NEED_", "bool composite")
    old_definition = "\n".join(line for line in definition.splitlines() if not line.startswith(later))
    writer = BagWriter(tmp_path / "bag")
    writer.add_topic("/brace/episode", "brace_msgs/msg/Episode")
    writer.add_topic("/brace/plan", "brace_msgs/msg/Plan", definition=old_definition.encode())
    writer.write("/brace/episode", serialize_message(Episode(event=0, episode=0, world="pickfruit")), 1_000_000_000)
    writer.write("/brace/plan", recorded, 2_000_000_000)
    writer.close()
    with pytest.raises(RuntimeError):     # today's class cannot read it (rclpy's RMWError)
        deserialize_message(recorded, Plan)
    audit = audit_bag(tmp_path / "bag")
    assert audit.recorded_definitions == 1 and not audit.note and audit.exit_code == EXIT_INTACT
    assert [(agent, signature) for _e, agent, signature in audit.records.plans] == [("arm_0", plan_signature(plan))]
    print_integrity(tmp_path / "bag", audit)
    assert "1 messages recorded with older message definitions" in capsys.readouterr().err


def test_the_collision_monitors_interventions_are_recounted_from_the_bag(tmp_path):
    from brace_msgs.msg import CollisionMonitorState as Zone

    from brace_audit.audit_report import report, summary
    from brace_common.vocabulary import ZoneAction

    writer = BagWriter(tmp_path / "bag")
    writer.add_topic("/brace/episode", "brace_msgs/msg/Episode")
    writer.add_topic("/brace/collision_monitor_state", "brace_msgs/msg/CollisionMonitorState")
    writer.write("/brace/episode", serialize_message(Episode(event=0, episode=0, world="isaac_sim")), 1)
    actions = [("a", ZoneAction.APPROACH), ("a", ZoneAction.STOP), ("b", ZoneAction.SLOWDOWN), ("a", ZoneAction.STOP),
               ("a", ZoneAction.NONE), ("a", ZoneAction.STOP), ("b", ZoneAction.APPROACH), ("b", 9)]
    for i, (agent, action) in enumerate(actions):   # a state is published when the action or obstacle changes
        writer.write("/brace/collision_monitor_state", serialize_message(Zone(agent_id=agent, action=int(action))),
                     10 + i)
    writer.write("/brace/episode", serialize_message(Episode(event=1, episode=0, success=True)), 100)
    writer.close()
    audit = audit_bag(tmp_path / "bag")
    assert audit.records.interventions == [(0, "a", ZoneAction.APPROACH), (0, "a", ZoneAction.STOP),
                                           (0, "b", ZoneAction.SLOWDOWN), (0, "a", ZoneAction.STOP),
                                           (0, "b", ZoneAction.APPROACH)]
    row = summary(audit.records)
    assert (row["safety_stops"], row["slowdowns"], row["approaches"]) == (2, 1, 2)
    assert "1 malformed" in audit.note and "## Collision monitor" in report([audit.records])
