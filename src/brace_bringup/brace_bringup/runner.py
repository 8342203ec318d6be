"""`brace-run <run>`: a run's stack in one process, one variant after another.

Renders each variant's run plan (brace_bringup.run_plan: the processes and
the parameter file the launch files start too): the plan's processes (a
planner server, the AirSim peer) and the nodes the run starts in their own
process (`own_process`) run as children, kept from one variant to the next
while unchanged; the other nodes are composed on one executor in the stack's
namespace. Readiness is the graph's: the world waits for its
peers. `<run>` is a run configuration's path or the name of an installed one
(`demo`: share/brace_bringup/runs/demo.yaml). Each variant gets
`<output>/<timestamp>/<variant>/` with its parameter file and its audit bag;
the run folder gets the tables' CSVs (summary, episodes, the world's own),
latency_cdf.png and slo_violation.png, and every table is printed (the
paper's, then the world's own: Table 32, the drone intersection's). The
tables come from the records the live collector built from the run's messages;
`brace-audit report <run folder>` computes the same text from the bags alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import rclpy
import yaml
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from brace_audit.audit import REPORTED, RecordCollector, write_csvs
from brace_audit.audit_report import summary
from brace_audit.run_tables import run_tables
from brace_audit.view_server import viewer_url
from brace_common import names, qos
from brace_common.config import ConfigError
from brace_common.names import DEFAULT_NAMESPACE
from brace_common.spin import ShutdownSignals, autostart, retire, spin_once

from .graph import VIEWER, NodeSpec
from .run_config import RunConfig
from .run_plan import AIRSIM_MONITOR, AIRSIM_PEER, PLANNER_SERVER, Process, RunEnded, RunPlan, absolute_namespace, plan


class LiveCollector(Node):
    """Collects the run's records live (the same RecordCollector the bag report uses)."""

    def __init__(self, variant: str, **kwargs) -> None:
        super().__init__("brace_run_collector", **kwargs)

        self.collector = RecordCollector(variant)
        self.lock = threading.Lock()
        for topic, cls in REPORTED.items():
            self.create_subscription(cls, topic, lambda m, t=topic: self.on_message(t, m),
                                     qos.PLANS if topic == names.PLAN else qos.EVENTS)

    def on_message(self, topic: str, msg) -> None:
        """Add one message with its receive time."""
        with self.lock:
            self.collector.add(topic, msg, self.get_clock().now().nanoseconds)


def _progress(variant: str, world, collector: LiveCollector, started: float) -> str:
    calls = collector.collector.records.calls
    missed = sum(not c.slo_met for c in calls)
    return (f"[{variant}] {world.progress()} | calls {len(calls):3d} "
            f"SLO missed {missed:3d} | {time.monotonic() - started:5.0f} s")


def compose(spec: NodeSpec, **kwargs) -> Node:
    """The node of `spec` in this process (its class, under its launch name)."""
    module, _, cls = spec.node_class.partition(":")
    node_cls = getattr(importlib.import_module(module), cls)
    return node_cls(cli_args=["--ros-args", "-r", f"__node:={spec.name}"], **kwargs)


def _drain(executor, recorder, collector: LiveCollector, episodes: int, settle_s: float = 1.0,
           limit_s: float = 30.0) -> None:
    """Spin until the run is quiet and the bag holds what the live tables count: every episode's end collected and
    recorded, every admitted decision's call record collected (a call in flight at the last episode's end closes
    later, by its result or its hard deadline), and the bag exactly as many call records, decisions and plans as
    the collector.

    At least `settle_s`, at most `limit_s`; a fixed wait alone lost the last episode's end, and later the last
    call record, from the bag on a loaded machine.
    """
    started = time.monotonic()

    def recorded(topic: str) -> Optional[int]:
        """Messages of `topic` in the bag so far (None: not recorded)."""
        found = recorder.writer.topics.get(recorder.resolve_topic_name(topic)) if recorder.writer is not None else None
        return None if found is None else found.count

    missing: list[str] = []

    def complete() -> bool:
        with collector.lock:
            records = collector.collector.records
            live = {names.REPLAN_CALLS: len(records.calls), names.DECISIONS: len(records.decisions),
                    names.PLAN: len(records.plans)}
            collected = len(records.episodes)
            in_flight = {d.decision_id for _, d in records.decisions if d.admitted and d.decision_id} - \
                {c.decision_id for c in records.calls}
        in_bag = {topic: recorded(topic) for topic in (names.EPISODE, *live)}
        missing[:] = ([f"episode ends {collected}/{episodes}"] if collected < episodes else []) + \
            ([f"call records of {len(in_flight)} admitted decisions"] if in_flight else []) + \
            [f"{t}: {in_bag[t]} in the bag, {n} collected" for t, n in live.items()
             if in_bag[t] is not None and in_bag[t] != n] + \
            ([f"episode messages in the bag {in_bag[names.EPISODE]}/{2 * episodes}"]
             if in_bag[names.EPISODE] is not None and in_bag[names.EPISODE] < 2 * episodes else [])
        return not missing

    while time.monotonic() - started < limit_s and (time.monotonic() - started < settle_s or not complete()):
        spin_once(executor, 0.05)
    if missing:
        print(f"brace-run: after {limit_s:.0f} s the run is still not quiet ({'; '.join(missing)}); the bag and the "
              "printed tables may differ", file=sys.stderr, flush=True)


class Children:
    """A run plan's processes as children of brace-run (a context manager that stops them all).

    `start` keeps a process the previous plan started when the new plan has it unchanged (one planner server for
    every variant) and replaces the others; each logs to `<folder>/<name>.log`.
    """

    STOP_TIMEOUT_S = 10.0

    def __init__(self, folder: Path, quiet: bool = False) -> None:
        self.folder = folder
        self.quiet = quiet
        self.running: dict[str, tuple[Process, subprocess.Popen, object]] = {}

    def start(self, processes: tuple[Process, ...]) -> None:
        """Run exactly `processes`: stop the running ones not among them, start the missing ones."""
        wanted = {p.name: p for p in processes}
        for name, (process, _, _) in list(self.running.items()):
            if wanted.get(name) != process:
                self.stop(name)
        self.folder.mkdir(parents=True, exist_ok=True)
        for process in processes:
            if process.name in self.running:
                continue
            command = process.command()
            if not self.quiet:
                print(f"{process.name}: {' '.join(command)}", flush=True)
            log = (self.folder / f"{process.name}.log").open("ab")
            child = subprocess.Popen(command, env={**os.environ, **dict(process.environment)}, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            self.running[process.name] = (process, child, log)

    def check(self, run_plan: RunPlan) -> None:
        """RunEnded when a child exited (the plan's end, with the child's log's tail): every child is needed by the
        run, so its exit ends the run with the child's code (1 when that was 0)."""
        end = run_plan.first_end({name: child for name, (_, child, _) in self.running.items()})
        if end is not None:
            tail = (self.folder / f"{end.process}.log").read_text(errors="replace")[-2000:]
            raise RunEnded(end, tail)

    def stop(self, name: str) -> None:
        """SIGTERM a child (its process group), SIGKILL after STOP_TIMEOUT_S."""
        _, child, log = self.running.pop(name)
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(self.STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        log.close()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc) -> None:
        for name in list(self.running):
            self.stop(name)


def free_ports() -> dict[str, int]:
    """A free port on 127.0.0.1 for each process a plan may start (brace-run's instead of the run's fixed ones)."""
    ports = {}
    for name in (PLANNER_SERVER, AIRSIM_PEER, AIRSIM_MONITOR):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports[name] = int(sock.getsockname()[1])
    return ports


def run_variant(run_plan: RunPlan, quiet: bool = False, children: Children | None = None,
                signals: ShutdownSignals | None = None):
    """Run one variant's plan to completion (its processes in `children`, else started and stopped here); return its
    live RunRecords and bag path. RunEnded when one of its processes exits first; KeyboardInterrupt after SIGINT /
    SIGTERM (in `signals`, else handled here) once the nodes are down, unless the stack has no world (then the
    signal is its end)."""
    if signals is None:
        with ShutdownSignals() as own_signals:
            return run_variant(run_plan, quiet, children, own_signals)
    if children is None:
        with Children(run_plan.folder, quiet) as own:
            return run_variant(run_plan, quiet, own, signals)
    signals.starting()
    children.start(run_plan.processes + run_plan.node_processes())
    variant = run_plan.variant
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(run_plan.parameters)], context=context,
               signal_handler_options=SignalHandlerOptions.NO)  # `signals` stop the loop; the nodes go down in order
    nodes: dict[str, Node] = {}
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    ns = {"context": context, "namespace": run_plan.namespace}
    try:
        # Every node at once, as launch starts them; the world's readiness wait orders the start.
        for spec in run_plan.composed:
            nodes[spec.name] = compose(spec, **ns)
        collector = nodes["brace_run_collector"] = LiveCollector(variant, **ns)
        for spec in run_plan.composed:
            node = nodes[spec.name]
            if spec.lifecycle and node.get_parameter("autostart").value and (error := autostart(node)) is not None:
                raise ConfigError(spec.name, error)
        for n in nodes.values():
            executor.add_node(n)
        world, recorder = nodes.get(run_plan.stack.world), nodes["audit_recorder"]
        started, last_print = time.monotonic(), 0.0
        signals.spinning(executor.wake)
        # a stack without a world: until Ctrl-C
        while (world is None or not world.done) and context.ok() and signals.received is None:
            spin_once(executor, 0.05)
            children.check(run_plan)
            if world is not None and not quiet and \
                    time.monotonic() - last_print > (1.0 if sys.stdout.isatty() else 15.0):  # logs: sparse
                line = _progress(variant, world, collector, started)
                print("\r" + line if sys.stdout.isatty() else line, end="" if sys.stdout.isatty() else "\n",
                      flush=True)
                last_print = time.monotonic()
        if signals.received is not None and world is not None:
            raise KeyboardInterrupt
        # the episodes the world started (its lifecycle; every number comes from the messages)
        _drain(executor, recorder, collector, world.episode + 1 if world is not None else 0)
        if world is not None and not quiet:
            print(("\r" if sys.stdout.isatty() else "") + _progress(variant, world, collector, started) + " done",
                  flush=True)
        recorder.close()
        return collector.collector.records, recorder.path
    finally:
        signals.stopping()
        executor.shutdown()
        retire(executor)
        for n in nodes.values():
            n.destroy_node()
        context.try_shutdown()


def plots(runs, folder: Path) -> list[Path]:
    """latency_cdf.png (per-variant CDF with the SLO line) and slo_violation.png."""
    # matplotlib: the Agg backend must be chosen before pyplot loads
    import matplotlib

    matplotlib.use("Agg")
    # matplotlib: the Agg backend must be chosen before pyplot loads
    import matplotlib.pyplot as plt

    out = []
    fig, ax = plt.subplots(figsize=(6, 4))
    slo = None
    for r in runs:
        lat = sorted(c.latency_ms for c in r.calls)
        if lat:
            ax.step(lat, [(i + 1) / len(lat) for i in range(len(lat))], where="post", label=r.variant)
            slo = slo or (sum(c.slo_ms for c in r.calls) / len(r.calls))
    if slo:
        ax.axvline(slo, color="red", linestyle="--", label=f"SLO {slo:.0f} ms")
    ax.set_xlabel("replanning call latency (ms)")
    ax.set_ylabel("CDF")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.append(folder / "latency_cdf.png")
    fig.savefig(out[-1], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = [summary(r) for r in runs]
    ax.bar([r["variant"] for r in rows], [100 * (r["slo_violation"] if r["calls"] else 0) for r in rows],
           color=["tab:red" if r["calls"] and r["slo_violation"] > 0.05 else "tab:green" for r in rows])
    ax.axhline(5, color="black", linestyle=":", label="5% target")
    ax.set_ylabel("SLO violation (% of calls)")
    ax.legend()
    fig.tight_layout()
    out.append(folder / "slo_violation.png")
    fig.savefig(out[-1], dpi=120)
    plt.close(fig)
    return out


def run(cfg: RunConfig, variants: list[str], output: Path, extra: dict[str, dict], quiet: bool = False,
        namespace: str = DEFAULT_NAMESPACE):
    """Every variant in order, the stack in `namespace`; write the CSVs and plots; return (run folder, live records
    per variant)."""

    folder = output / time.strftime("%Y%m%d_%H%M%S")
    runs = []
    ports = free_ports()
    with ShutdownSignals() as signals, Children(folder, quiet) as children:
        for variant in variants:
            records, _bag = run_variant(plan(cfg, variant, folder / variant, extra, ports, namespace=namespace), quiet,
                                        children, signals)
            runs.append(records)
    write_csvs(runs, folder)
    plots(runs, folder)
    return folder, runs


def argument_parser() -> argparse.ArgumentParser:
    """brace-run's command line."""
    ap = argparse.ArgumentParser(prog="brace-run", description=__doc__.splitlines()[0])
    ap.add_argument("config", help="run configuration: a file, or the name of an installed one (e.g. demo)")
    ap.add_argument("--variants", nargs="*", help="subset of the config's variants (default: all, in order)")
    ap.add_argument("--episodes", type=int)
    ap.add_argument("--agents", type=int)
    ap.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                    help="override one parameter of every variant (YAML value), e.g. embedded_sim.max_steps=80")
    ap.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                    help="namespace of the stack's nodes and topics (one per robot where several share a DDS domain)")
    ap.add_argument("--output", type=Path, default=Path("runs"))
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--view", action="store_true",
                    help="run the live viewer beside the stack and print its URL (Rerun's web viewer on 127.0.0.1; "
                         "brace_viewer.port etc. with --set)")
    return ap


def main(argv=None) -> int:
    """`brace-run demo [--variants ...] [--episodes N] [--agents K]` (an installed run's name or a file)."""
    args = argument_parser().parse_args(argv)
    try:
        cfg = RunConfig.load(args.config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"brace-run: {exc}", file=sys.stderr)
        return 2
    cfg.viewer = args.view
    if not cfg.stack.world and len(args.variants or cfg.variants) != 1:
        print(f"brace-run: stack '{cfg.stack.name}' has no world that ends a run: name one variant (--variants ...); "
              "it runs until Ctrl-C", file=sys.stderr)
        return 2
    variants = args.variants or list(cfg.variants)
    missing = [v for v in variants if v not in cfg.variants]
    if missing:
        print(f"brace-run: unknown variants {missing}; the config has {list(cfg.variants)}", file=sys.stderr)
        return 2
    extra = {cfg.stack.world: {k: v for k, v in (("episodes", args.episodes), ("num_agents", args.agents)) if v}}
    for item in args.set:
        key, sep, value = item.partition("=")
        node, dot, param = key.partition(".")
        if not sep or not dot or node not in cfg.node_names or not param:
            print(f"brace-run: --set '{item}' is not NODE.PARAM=VALUE with NODE one of {', '.join(cfg.node_names)}",
                  file=sys.stderr)
            return 2
        extra.setdefault(node, {})[param] = yaml.safe_load(value)
    if cfg.viewer:
        shown = cfg.parameters(variants[0], extra)[VIEWER.name]
        print(f"viewer: {viewer_url(shown['bind'], int(shown['grpc_port']), int(shown['port']))} (each variant's "
              "recording in turn; `brace-audit view <run folder>` shows the run again after it ends)", flush=True)
    try:
        folder, runs = run(cfg, variants, args.output, extra, args.quiet, absolute_namespace(args.namespace))
    except ConfigError as exc:
        print(f"brace-run: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except RunEnded as exc:  # a process of the run (a planner server, the AirSim peer, a node of its own) exited
        print(f"brace-run: {exc}", file=sys.stderr)
        return exc.end.code
    except KeyboardInterrupt:
        return 130
    print(run_tables(runs))
    print(f"run folder: {folder} (bags, summary.csv, episodes.csv, latency_cdf.png, slo_violation.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
