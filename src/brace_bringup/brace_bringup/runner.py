"""`brace-run <config>`: a run's stack in one process, one variant after another.

Composes the nodes a stack runs (brace_bringup.graph: the same ones
`launch/brace_sim.launch.py` starts, in the same namespace) on one executor,
with the parameter file `RunConfig.write_parameters` writes for each variant
(the launch file passes the same one). Readiness is the graph's: the
simulator waits for its peers. Each variant gets `<output>/<timestamp>/<variant>/`
with its parameter file and its audit bag; the run folder gets summary.csv,
latency_cdf.png and slo_violation.png, and the Table-2-shaped summary is
printed. The bag's report (`brace-audit report <run folder>`) recomputes the
same numbers from the bags alone.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import threading
import time
from pathlib import Path

import rclpy
import yaml
from brace_msgs.msg import Episode, Plan, ReplanCall, ReplanDecision
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node

from brace_audit.audit import RecordCollector, write_csvs
from brace_audit.audit_report import report, summary
from brace_common import names, qos
from brace_common.config import ConfigError
from brace_common.spin import autostart, spin_once
from erecap_planner.local_server import LocalServer, served_model
from sim_bridges.airsim.airsim_peer import AirSimPeer
from sim_bridges.airsim.intersection import settings

from .graph import NodeSpec
from .run_config import RunConfig, intersection_of


class LiveCollector(Node):
    """Collects the run's records live (the same RecordCollector the bag report uses)."""

    def __init__(self, variant: str, **kwargs) -> None:
        super().__init__("brace_run_collector", **kwargs)

        self.collector = RecordCollector(variant)
        self.lock = threading.Lock()
        for topic, cls in ((names.REPLAN_CALLS, ReplanCall), (names.DECISIONS, ReplanDecision), (names.PLAN, Plan),
                           (names.EPISODE, Episode)):
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
    """Spin until the recorder and the collector hold every episode's end (the last messages of a run).

    At least `settle_s` (calls and decisions still in flight), at most `limit_s`; a fixed wait alone lost the
    last episode's end from the bag on a loaded machine.
    """
    started = time.monotonic()

    def complete() -> bool:
        ends = recorder.writer.topics.get(recorder.resolve_topic_name(names.EPISODE)) \
            if recorder.writer is not None else None
        with collector.lock:
            collected = len(collector.collector.records.episodes)
        return collected >= episodes and (ends is None or ends.count >= 2 * episodes)

    while time.monotonic() - started < limit_s and (time.monotonic() - started < settle_s or not complete()):
        spin_once(executor, 0.05)


def run_variant(cfg: RunConfig, variant: str, folder: Path, extra: dict[str, dict], quiet: bool = False):
    """Run one variant to completion; return its live RunRecords, bag path and episode results."""
    params_file = cfg.write_parameters(variant, folder, extra)
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(params_file)], context=context)
    nodes: dict[str, Node] = {}
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    ns = {"context": context, "namespace": names.DEFAULT_NAMESPACE}
    try:
        # Every node at once, as launch starts them; the world's readiness wait orders the start.
        for spec in cfg.stack.nodes:
            nodes[spec.name] = compose(spec, **ns)
        collector = nodes["brace_run_collector"] = LiveCollector(variant, **ns)
        for spec in cfg.stack.nodes:
            node = nodes[spec.name]
            if spec.lifecycle and node.get_parameter("autostart").value and (error := autostart(node)) is not None:
                raise ConfigError(spec.name, error)
        for n in nodes.values():
            executor.add_node(n)
        world, recorder = nodes.get(cfg.stack.world), nodes["audit_recorder"]
        started, last_print = time.monotonic(), 0.0
        try:
            while (world is None or not world.done) and context.ok():  # a stack without a world: until Ctrl-C
                spin_once(executor, 0.05)
                if world is not None and not quiet and \
                        time.monotonic() - last_print > (1.0 if sys.stdout.isatty() else 15.0):  # logs: sparse
                    line = _progress(variant, world, collector, started)
                    print("\r" + line if sys.stdout.isatty() else line, end="" if sys.stdout.isatty() else "\n",
                          flush=True)
                    last_print = time.monotonic()
        except KeyboardInterrupt:
            if world is not None:
                raise
        results = world.results if world is not None else []
        _drain(executor, recorder, collector, len(results))
        if world is not None and not quiet:
            print(("\r" if sys.stdout.isatty() else "") + _progress(variant, world, collector, started) + " done",
                  flush=True)
        recorder.close()
        return collector.collector.records, recorder.path, results, list(getattr(world, "episode_rows", []))
    finally:
        executor.shutdown()
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


@contextlib.contextmanager
def planner_server(cfg: RunConfig, folder: Path, extra: dict[str, dict]):
    """The run's local planner server, if it names one, on a free port for all its variants (its log in `folder`)."""
    if not cfg.planner_server:
        yield None
        return

    spec = cfg.server_spec()
    folder.mkdir(parents=True, exist_ok=True)
    server = LocalServer(served_model(spec["engine"], spec["model"], spec["adapter"]), dtype=spec["dtype"],
                         threads=int(spec["threads"]), log_path=folder / "planner_server.log", engine=spec["engine"])
    print(f"planner server: {spec['engine']} on {server.folder.name} at {server.base_url}", flush=True)
    with server.start():
        extra.setdefault("erecap_planner", {})["server_url"] = server.base_url
        yield server


@contextlib.contextmanager
def airsim_peer(cfg: RunConfig, variant: str, folder: Path, extra: dict[str, dict]):
    """The variant's protocol-level AirSim (brace-airsim-peer in this process), if the run names one, on a free
    port with the settings.json of the variant's intersection (written to `folder`); yields the variant's extras
    with the bridge pointed at it."""
    if not cfg.airsim_peer:
        yield extra
        return

    spec = cfg.peer_spec()
    scenario = intersection_of(cfg.parameters(variant, extra)["airsim_bridge"])
    sim_settings = settings(scenario, float(spec["clock_speed"]))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(sim_settings, indent=2))
    with AirSimPeer(sim_settings, port=0) as peer:
        bridge = {**extra.get("airsim_bridge", {}), "host": "127.0.0.1", "port": peer.port}
        yield {**extra, "airsim_bridge": bridge}


def run(cfg: RunConfig, variants: list[str], output: Path, extra: dict[str, dict], quiet: bool = False):
    """Every variant in order; write CSV and plots; return (run folder, live records per variant)."""

    folder = output / time.strftime("%Y%m%d_%H%M%S")
    runs, rows = [], []
    with planner_server(cfg, folder, extra):
        for variant in variants:
            with airsim_peer(cfg, variant, folder / variant, extra) as variant_extra:
                records, _bag, _results, episode_rows = run_variant(cfg, variant, folder / variant, variant_extra,
                                                                    quiet)
            runs.append(records)
            rows.append(episode_rows)
    write_csvs(runs, folder)
    plots(runs, folder)
    if cfg.stack.report is not None:
        print(cfg.stack.report(runs, rows, folder))
    return folder, runs


def main(argv=None) -> int:
    """`brace-run config/runs/demo.yaml [--variants ...] [--episodes N] [--agents K]`."""

    ap = argparse.ArgumentParser(prog="brace-run", description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--variants", nargs="*", help="subset of the config's variants (default: all, in order)")
    ap.add_argument("--episodes", type=int)
    ap.add_argument("--agents", type=int)
    ap.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                    help="override one parameter of every variant (YAML value), e.g. embedded_sim.max_steps=80")
    ap.add_argument("--output", type=Path, default=Path("runs"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        cfg = RunConfig.load(args.config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"brace-run: {exc}", file=sys.stderr)
        return 2
    if not cfg.stack.world and len(args.variants or cfg.variants) != 1:
        print(f"brace-run: stack '{cfg.stack.name}' has no world that ends a run: name one variant (--variants ...); "
              "it runs until Ctrl-C", file=sys.stderr)
        return 2
    variants = args.variants or list(cfg.variants)
    missing = [v for v in variants if v not in cfg.variants]
    if missing:
        print(f"brace-run: unknown variants {missing}; the config has {list(cfg.variants)}", file=sys.stderr)
        return 2
    extra = {cfg.stack.world: {k: v for k, v in (("episodes", args.episodes), ("agents", args.agents)) if v}}
    for item in args.set:
        key, sep, value = item.partition("=")
        node, dot, param = key.partition(".")
        if not sep or not dot or node not in cfg.stack.names or not param:
            print(f"brace-run: --set '{item}' is not NODE.PARAM=VALUE with NODE one of {', '.join(cfg.stack.names)}",
                  file=sys.stderr)
            return 2
        extra.setdefault(node, {})[param] = yaml.safe_load(value)
    try:
        folder, runs = run(cfg, variants, args.output, extra, args.quiet)
    except ConfigError as exc:
        print(f"brace-run: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(report(runs))
    print(f"run folder: {folder} (bags, summary.csv, latency_cdf.png, slo_violation.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
