"""`brace-audit`: recompute a run's tables from its bag, recover a damaged bag, replay a bag on ROS 2, or trace an
episode,
or show a run in Rerun's web viewer.

    brace-audit report <bag | run folder> [--csv DIR]
    brace-audit recover <bag> [--output OUT | --in-place]
    brace-audit replay <bag> [--rate X] [--topics T ...]
    brace-audit trace <bag | run folder --variant V> --episode N [--agent A] [--every S]
    brace-audit view <bag | run folder> [--port P] [--grpc-port G] [--bind ADDRESS] [--no-serve]

`report` reads the bags alone and prints what brace-run printed (run_tables:
the paper's tables and the world's own, Table 32 or the drone intersection's);
a run folder with several bags (one per variant) gives one row per bag. A truncated or corrupt
bag, or one a killed recorder left unfinished, is reported as damaged (exit 1)
with what was lost, which episodes are incomplete and the tables of the
recovered part. `recover` rewrites such a bag into a finished one that every
MCAP / rosbag2 reader opens (it keeps what was read; it invents nothing).
`replay` republishes the recorded topics with their recorded timing (scaled by
--rate) for RViz. `trace` prints one episode as a timeline (episode_trace): the
first thing to read when an episode of a table failed. `view` writes each bag's Rerun recording beside it
(`<bag>.rrd`, view_bag: the live viewer's mapping) and serves them on 127.0.0.1 until Ctrl-C or SIGTERM.
`RecordCollector` turns messages into RunRecords and is shared by the live run and the report, so both compute
the same numbers.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import rclpy
from brace_msgs.msg import CollisionMonitorState, Episode, Plan, ReplanCall, ReplanDecision
from rclpy.executors import ExternalShutdownException
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from brace_common import names
from brace_common.clock import seconds_of
from brace_common.convert import decision_from_msg, plan_signature
from brace_common.episode import episode_from_msg
from brace_common.vocabulary import CallStatus, EpisodeEvent, ZoneAction

from .audit_recorder_node import message_class
from .audit_report import CallRow, RunRecords, phase_breakdown, summary, suppression_rows
from .bag import RECOVERY_NOTE, BagError, read_bag, recover_bag
from .csv_rows import write_rows
from .episode_trace import TraceError, episode_trace
from .recorded_types import RecordedTypes
from .run_tables import run_tables, world_tables

REPORTED = {names.REPLAN_CALLS: ReplanCall, names.DECISIONS: ReplanDecision, names.PLAN: Plan,
            names.EPISODE: Episode, names.COLLISION_MONITOR_STATE: CollisionMonitorState}
"""The topics a report reads, by their relative name (a bag of any namespace reads the same)."""


def topic_role(topic: str) -> str:
    """The relative name of a recorded topic: '/brace/replan_calls' -> 'replan_calls'."""
    return topic.rsplit("/", 1)[-1]


class RecordCollector:
    """Accumulates RunRecords from call records, decisions, plans and episode events, in arrival order."""

    def __init__(self, variant: str = ""):
        self._records = RunRecords(variant=variant)
        self.episode = 0
        self.malformed = 0
        self.first_ns: int | None = None
        self.last_ns = 0
        self.first_start_s: float | None = None  # the first episode start's stamp (s)
        self.last_end_s: float | None = None     # the last episode end's stamp (s)
        self.zone_actions: dict[str, int] = {}   # each agent's latest collision monitor action

    @property
    def records(self) -> RunRecords:
        """The records so far, with the run's duration: by the world's stamps from the first start to the last end
        (the same live and in the bag); by arrival until an episode has ended."""
        if self.first_start_s is not None and self.last_end_s is not None and self.last_end_s > self.first_start_s:
            self._records.duration_s = self.last_end_s - self.first_start_s
        elif self.first_ns is not None:
            self._records.duration_s = (self.last_ns - self.first_ns) / 1e9
        return self._records

    def add(self, topic: str, msg, time_ns: int) -> None:
        """One message of a reported topic."""
        self.first_ns = time_ns if self.first_ns is None else self.first_ns
        self.last_ns = max(self.last_ns, time_ns)
        role = topic_role(topic)
        if role == names.EPISODE:
            stamp_s = seconds_of(msg.header.stamp)
            if msg.event == EpisodeEvent.START:
                self.episode = int(msg.episode)
                self._records.variant = self._records.variant or msg.variant
                self._records.world = self._records.world or msg.world
                self._records.num_agents = self._records.num_agents or int(msg.num_agents)
                self._records.ledger.start(int(msg.episode), time_ns)
                self.first_start_s = stamp_s if self.first_start_s is None else self.first_start_s
            else:
                self._records.episodes.append(episode_from_msg(msg))
                self._records.ledger.end(int(msg.episode), time_ns)
                self.last_end_s = stamp_s
            return
        if role == names.REPLAN_CALLS:
            self._records.ledger.call(time_ns)
            phases = {p.phase: (float(p.duration_ms), int(p.tokens_in), int(p.tokens_out)) for p in msg.phases}
            try:
                status = CallStatus(msg.status)
            except ValueError:
                self.malformed += 1
                return
            self._records.calls.append(CallRow(self.episode, msg.agent_id, status, float(msg.latency_ms),
                                              float(msg.slo_ms), bool(msg.slo_met), int(msg.tokens_before),
                                              int(msg.tokens_after), msg.compressor, phases,
                                              int(getattr(msg, "tokens_reused", 0)), msg.decision_id,
                                              int(getattr(msg, "recap_call", 0)), int(getattr(msg, "depth", 0)),
                                              len(getattr(msg, "vetoed", ()))))
        elif role == names.DECISIONS:
            try:
                self._records.decisions.append((self.episode, decision_from_msg(msg)))
            except ValueError:
                self.malformed += 1
        elif role == names.PLAN:
            self._records.plans.append((self.episode, msg.agent_id, plan_signature(msg)))
        elif role == names.COLLISION_MONITOR_STATE:
            self._add_zone_action(msg)

    def _add_zone_action(self, msg) -> None:
        # An intervention begins when an agent's action changes to a zone's (the monitor's own counting rule).
        self._records.monitored = True
        try:
            action = ZoneAction(msg.action)
        except ValueError:
            self.malformed += 1
            return
        if action is not ZoneAction.NONE and self.zone_actions.get(msg.agent_id) != action:
            self._records.interventions.append((self.episode, msg.agent_id, action))
        self.zone_actions[msg.agent_id] = action


EXIT_INTACT, EXIT_RECOVERED, EXIT_UNREADABLE = 0, 1, 2
"""`brace-audit report` exit codes: every bag intact; some bag damaged but read in part; a bag with nothing readable."""


def records_from_bag(bag: Path, variant: str = "") -> tuple[RunRecords, str]:
    """RunRecords of a bag and a note on damage ('' when the bag is intact)."""
    audit = audit_bag(bag, variant)
    return audit.records, audit.note


def load_bag(bag: Path, variant: str = "") -> tuple[RunRecords, str, int]:
    """RunRecords of a bag, a note on damage ('' when intact) and how many messages could be read."""
    audit = audit_bag(bag, variant)
    return audit.records, audit.note, audit.count


@dataclass
class BagAudit:
    """A bag read for a report: its records, the damage found, what a recovery recorded, incomplete episodes."""

    records: RunRecords
    note: str                          # damage and malformed messages ('' when intact)
    count: int                         # messages read
    lost_data: bool = False            # messages were lost (damage, or a recovery that recorded a loss)
    recovery: dict = field(default_factory=dict)  # the note `brace-audit recover` left in the file ({} if none)
    first_ns: int = 0                  # log time of its first reported message (orders a run folder's bags)
    recorded_definitions: int = 0      # messages decoded with the older definitions the bag recorded

    @property
    def problems(self) -> list[str]:
        """Incomplete episodes and calls without their episode."""
        return self.records.ledger.problems()

    @property
    def exit_code(self) -> int:
        """EXIT_RECOVERED when the bag is damaged, or was recovered and lost messages or episode ends."""
        if self.note or (self.recovery and (self.lost_data or self.problems)):
            return EXIT_RECOVERED
        return EXIT_INTACT


def audit_bag(bag: Path, variant: str = "") -> BagAudit:
    """Read a bag for a report (BagError / OSError when nothing can be read)."""
    contents = read_bag(bag)
    collector = RecordCollector(variant)
    recorded, older = RecordedTypes(contents.definitions), 0
    for m in contents.messages:
        cls = REPORTED.get(topic_role(m.topic))
        if cls is None:
            continue
        try:                # recorded before a field was added to the type: its own schema reads it
            msg, old = recorded.read(m.type, m.data, cls)
        except (KeyError, ValueError):  # neither reads it: counted, never fatal
            collector.malformed += 1
            continue
        older += old
        collector.add(m.topic, msg, m.log_time_ns)
    note = str(contents.damage) if contents.damage else ""
    if collector.malformed:
        note += f"{'; ' if note else ''}{collector.malformed} malformed messages skipped"
    recovery = contents.notes.get(RECOVERY_NOTE, {})
    lost = bool(contents.damage and contents.damage.lost_data) or recovery.get("lost_data") == "true"
    return BagAudit(collector.records, note, len(contents.messages), lost, recovery, collector.first_ns or 0, older)


def find_bags(path: Path) -> list[Path]:
    """The bag itself, or every bag (a folder with metadata.yaml or .mcap files) directly under a run folder."""
    if path.is_file() or (path / "metadata.yaml").is_file() or list(path.glob("*.mcap")):
        return [path]
    bags = sorted(p for p in path.rglob("metadata.yaml"))
    return [b.parent for b in bags]


def bags_under(path: str) -> list[Path]:
    """`find_bags`, saying on stderr why there is nothing to read ([] then)."""
    try:
        bags = find_bags(Path(path))
    except OSError as exc:
        print(f"brace-audit: {exc}", file=sys.stderr)
        return []
    if not bags:
        print(f"brace-audit: no bag under {path}", file=sys.stderr)
    return bags


def write_csvs(runs: list[RunRecords], folder: Path) -> None:
    """summary.csv, phases.csv, suppression.csv, episodes.csv (every episode's fields and metrics) and each world's
    own table (run_tables.world_tables: table32.csv, intersection.csv) of the runs."""
    folder.mkdir(parents=True, exist_ok=True)
    tables = {"summary.csv": [summary(r) for r in runs],
              "phases.csv": [{"variant": r.variant, **row} for r in runs for row in phase_breakdown(r)],
              "suppression.csv": [{"variant": r.variant, **row} for r in runs for row in suppression_rows(r)],
              "episodes.csv": [{"variant": r.variant, "world": r.world, **e.as_row()} for r in runs
                               for e in r.episodes]}
    for name, rows in tables.items():
        write_rows(rows, folder / name)
    world_tables(runs, folder)


def cmd_report(args) -> int:
    """Print the tables of one bag or of every bag in a run folder; exit EXIT_INTACT / _RECOVERED / _UNREADABLE."""
    bags = bags_under(args.bag)
    if not bags:
        return EXIT_UNREADABLE
    audits, code = [], EXIT_INTACT
    for bag in bags:
        try:
            audit = audit_bag(bag)
        except (BagError, OSError) as exc:
            print(f"brace-audit: {bag}: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        if audit.count == 0:
            note = f" ({audit.note})" if audit.note else ""
            print(f"brace-audit: {bag}: no message could be read{note}", file=sys.stderr)
            return EXIT_UNREADABLE
        records = audit.records
        records.variant = records.variant or (bag.parent.name if bag.name == "bag" else bag.name)
        print_integrity(bag, audit)
        code = max(code, audit.exit_code)
        audits.append(audit)
    runs = [a.records for a in sorted(audits, key=lambda a: a.first_ns)]  # the variants in the order they ran
    print(run_tables(runs))
    if args.json:
        print(json.dumps([summary(r) for r in runs], indent=1, default=str))
    if args.csv:
        write_csvs(runs, Path(args.csv))
    return code


def print_integrity(bag: Path, audit: BagAudit) -> None:
    """WARNING lines for a damaged bag (what was lost, incomplete episodes); NOTE lines for a recovered or intact one.
    """
    damaged = audit.exit_code != EXIT_INTACT
    level = "WARNING" if damaged else "NOTE"
    if audit.note:
        print(f"WARNING {bag}: {audit.note}", file=sys.stderr)
        if not audit.recovery and "did not finish" in audit.note:
            print(f"WARNING {bag}: `brace-audit recover {bag}` rewrites it into a bag every MCAP reader opens",
                  file=sys.stderr)
    if audit.recovery:
        print(f"{level} {bag}: recovered by brace-audit recover from {audit.recovery.get('source', '?')}: "
              f"{audit.recovery.get('damage', '')}", file=sys.stderr)
    if audit.recorded_definitions:
        print(f"NOTE {bag}: {audit.recorded_definitions} messages recorded with older message definitions, read with "
              "the definitions the bag holds", file=sys.stderr)
    if audit.problems and (damaged or audit.recovery):
        print(f"WARNING {bag}: the tables lack what was lost:", file=sys.stderr)
    for line in audit.problems:
        print(f"{level} {bag}: {line}", file=sys.stderr)


def cmd_recover(args) -> int:
    """Rewrite a damaged bag into a finished one; exit 0 when written (or intact), EXIT_UNREADABLE when not."""
    try:
        contents = read_bag(Path(args.bag))
        if contents.damage is None:
            print(f"brace-audit: {args.bag} is intact; nothing to recover", file=sys.stderr)
            return 0
        result = recover_bag(Path(args.bag), args.output, in_place=args.in_place)
    except (BagError, OSError) as exc:
        print(f"brace-audit: {args.bag}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    kept = f"; the damaged file is kept as {result.kept_original}" if result.kept_original else ""
    dropped = f"; {result.dropped} messages without their schema dropped" if result.dropped else ""
    print(f"recovered {result.messages} messages into {result.output}{dropped}{kept}\n"
          f"source: {result.damage}", file=sys.stderr)
    return 0


def cmd_replay(args) -> int:
    """Republish the bag's topics with their recorded timing."""

    contents = read_bag(Path(args.bag))
    if contents.damage:
        print(f"WARNING: {contents.damage}; replaying what was recovered", file=sys.stderr)
    messages = [m for m in contents.messages if not args.topics or m.topic in args.topics]
    if not messages:
        print("brace-audit: nothing to replay", file=sys.stderr)
        return 1
    try:
        with rclpy.init():
            node = rclpy.create_node("brace_audit_replay")
            latched = QoSProfile(depth=64, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            pubs = {}
            for m in messages:
                if m.topic not in pubs:
                    pubs[m.topic] = node.create_publisher(message_class(m.type), m.topic,
                                                          latched if topic_role(m.topic) == names.PLAN else 100)
            time.sleep(args.wait)  # let subscribers discover the publishers
            start_wall, start_bag = time.monotonic(), messages[0].log_time_ns
            for m in messages:
                due = start_wall + (m.log_time_ns - start_bag) / 1e9 / args.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pubs[m.topic].publish(m.data)  # serialized bytes are published as they were recorded
            print(f"replayed {len(messages)} messages on {len(pubs)} topics", file=sys.stderr)
            node.destroy_node()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    return 0


def cmd_trace(args) -> int:
    """Print one episode's timeline from one bag (of a run folder: the variant's); EXIT_UNREADABLE when the bag or
    the episode is not there."""
    try:
        bags = find_bags(Path(args.bag))
    except OSError as exc:
        print(f"brace-audit: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.variant:
        bags = [b for b in bags if args.variant in (b.name, b.parent.name)]
    if len(bags) != 1:
        found = ", ".join(b.parent.name if b.name == "bag" else b.name for b in bags) or "none"
        print(f"brace-audit: trace reads one bag; {args.bag} has {len(bags)} (variants: {found}): name one with "
              f"--variant", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        contents = read_bag(bags[0])
        lines = episode_trace(contents, args.episode, message_class, args.every, args.agent)
    except (BagError, OSError, TraceError) as exc:
        print(f"brace-audit: {bags[0]}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if contents.damage is not None:
        print(f"brace-audit: {contents.damage}", file=sys.stderr)
    print("\n".join(str(line) for line in lines))
    return EXIT_INTACT


def cmd_view(args) -> int:
    """Write the .rrd of every bag and serve them in Rerun's web viewer until interrupted (`--no-serve`: only write);
    EXIT_RECOVERED when a bag was damaged (shown as far as it reads), EXIT_UNREADABLE when none could be read."""
    # rerun (its Arrow bindings) is a second's import that only `view` needs
    from .view_bag import bag_to_rrd
    from .view_server import ViewerError, ViewerServer
    bags = bags_under(args.bag)
    if not bags:
        return EXIT_UNREADABLE
    files, code = [], EXIT_INTACT
    for bag in bags:
        try:
            view = bag_to_rrd(bag)
        except (BagError, OSError) as exc:
            print(f"brace-audit: {bag}: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        skipped = f", {view.skipped} malformed messages skipped" if view.skipped else ""
        print(f"wrote {view.rrd}: {view.shown} messages, steps 0-{max(view.last_step, 0)}{skipped}")
        if view.damage:
            print(f"WARNING {bag}: shown as far as it reads: {view.damage}", file=sys.stderr)
            code = EXIT_RECOVERED
        files.append(view.rrd)
    if args.no_serve:
        return code
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(code))   # the server stops with us, not orphaned
    try:
        with ViewerServer(args.grpc_port, args.port, host=args.bind, files=files) as server:
            print(f"viewer: {server.url}  (Ctrl-C stops it)", flush=True)
            server.process.wait()
    except ViewerError as exc:
        print(f"brace-audit: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except KeyboardInterrupt:
        pass
    return code


def argument_parser() -> argparse.ArgumentParser:
    """brace-audit's command line: report, recover, replay, trace, view."""
    ap = argparse.ArgumentParser(prog="brace-audit", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="recompute every table from the bag alone")
    rep.add_argument("bag")
    rep.add_argument("--csv", help="also write the tables' CSVs here (summary, phases, suppression, episodes and the "
                                   "world's own: the files brace-run writes)")
    rep.add_argument("--json", action="store_true", help="also print the summary rows as JSON")
    rep.set_defaults(func=cmd_report)
    rec = sub.add_parser("recover", help="rewrite a damaged bag (a killed recorder's) into a finished one")
    rec.add_argument("bag")
    where = rec.add_mutually_exclusive_group()
    where.add_argument("--output", help="the recovered bag (default: <bag>_recovered beside it; must not exist)")
    where.add_argument("--in-place", action="store_true",
                       help="replace the bag's file and metadata.yaml, keeping the damaged file as <file>.damaged")
    rec.set_defaults(func=cmd_recover)
    play = sub.add_parser("replay", help="republish the recorded topics with their recorded timing")
    play.add_argument("bag")
    play.add_argument("--rate", type=float, default=1.0)
    play.add_argument("--topics", nargs="*", default=[])
    play.add_argument("--wait", type=float, default=1.0, help="seconds to wait for subscribers before replaying")
    play.set_defaults(func=cmd_replay)
    trace = sub.add_parser("trace", help="one episode's triggers, decisions, calls, plans, outcomes, verdicts and "
                                         "world states, in time order")
    trace.add_argument("bag", help="a bag, or a run folder with --variant")
    trace.add_argument("--episode", type=int, required=True)
    trace.add_argument("--variant", default="", help="the variant's bag in a run folder (brace-run's layout)")
    trace.add_argument("--agent", default="", help="only this agent's events (world states stay)")
    trace.add_argument("--every", type=float, default=5.0,
                       help="seconds between the world states printed (0: every one; negative: none)")
    trace.set_defaults(func=cmd_trace)
    view = sub.add_parser("view", help="write each bag's Rerun recording (<bag>.rrd) and serve it in the web viewer")
    view.add_argument("bag", help="a bag, or a run folder (every bag in it)")
    view.add_argument("--port", type=int, default=9090, help="the web viewer's HTTP port")
    view.add_argument("--grpc-port", type=int, default=9876, help="the viewer's data port (gRPC)")
    view.add_argument("--bind", default="127.0.0.1",
                      help="the address to serve on (0.0.0.0: every interface, for a viewer on another machine)")
    view.add_argument("--no-serve", action="store_true", help="only write the .rrd files")
    view.set_defaults(func=cmd_view)
    return ap


def main(argv=None) -> int:
    """`brace-audit report|recover|replay|trace|view`."""
    ap = argument_parser()
    args = ap.parse_args(argv)
    if getattr(args, "rate", 1.0) <= 0:
        ap.error("--rate must be > 0")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
