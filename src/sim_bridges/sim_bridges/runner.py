"""`brace-run <config>`: the closed loop in one process, one variant after another.

Composes the nodes `launch/brace_sim.launch.py` starts (embedded_sim,
trigger_monitor, brace_controller, erecap_planner, audit_recorder) on one
executor with the same parameter files, for every variant of a run config
(config/runs/*.yaml). Each variant gets `<output>/<timestamp>/<variant>/` with
its merged parameter file and its audit bag; the run folder gets summary.csv,
latency_cdf.png and slo_violation.png, and the Table-2-shaped summary is
printed. The bag's report (`brace-audit report <run folder>`) recomputes the
same numbers from the bags alone.
"""

from __future__ import annotations

import argparse
import copy
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import rclpy
import yaml
from brace_msgs.msg import Episode, Plan, ReplanCall, ReplanDecision
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node

from brace_controller import qos
from brace_controller.config import ConfigError

NODES = ("embedded_sim", "trigger_monitor", "brace_controller", "erecap_planner", "audit_recorder")


@dataclass
class RunConfig:
    """A run: parameter files per node, overrides for all variants, and the variants' overrides."""

    parameter_files: dict[str, list[str]]
    overrides: dict[str, dict] = field(default_factory=dict)
    variants: dict[str, dict[str, dict]] = field(default_factory=dict)
    root: Path = Path(".")

    @classmethod
    def load(cls, path: Path) -> RunConfig:
        """Read and check a run config; ValueError naming what is wrong. Paths are relative to its workspace."""
        raw = (yaml.safe_load(path.read_text()) or {}).get("run")
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: no 'run' mapping")
        root = path.resolve().parent
        while root != root.parent and not (root / "config").is_dir():
            root = root.parent
        cfg = cls(raw.get("parameter_files") or {}, raw.get("overrides") or {}, raw.get("variants") or {}, root)
        unknown = set(cfg.parameter_files) - set(NODES)
        if unknown:
            raise ValueError(f"{path}: parameter_files names unknown nodes {sorted(unknown)}")
        for files in cfg.parameter_files.values():
            for f in files:
                if not (root / f).is_file():
                    raise ValueError(f"{path}: parameter file {f} does not exist under {root}")
        if not cfg.variants:
            raise ValueError(f"{path}: no variants")
        for name, nodes in cfg.variants.items():
            bad = set(nodes or {}) - set(NODES)
            if bad:
                raise ValueError(f"{path}: variant {name} overrides unknown nodes {sorted(bad)}")
        return cfg

    def parameters(self, variant: str, extra: dict[str, dict]) -> dict[str, dict]:
        """node -> merged parameters: files in order, then run overrides, variant overrides, `extra`."""
        merged: dict[str, dict] = {n: {} for n in NODES}
        for node, files in self.parameter_files.items():
            for f in files:
                doc = yaml.safe_load((self.root / f).read_text()) or {}
                merged[node].update(((doc.get(node) or {}).get("ros__parameters")) or {})
        for layer in (self.overrides, self.variants.get(variant) or {}, extra):
            for node, values in (layer or {}).items():
                merged.setdefault(node, {}).update(copy.deepcopy(values or {}))
        return merged


class LiveCollector(Node):
    """Collects the run's records live (the same RecordCollector the bag report uses)."""

    def __init__(self, variant: str, **kwargs) -> None:
        super().__init__("brace_run_collector", **kwargs)
        from brace_controller.audit import RecordCollector

        self.collector = RecordCollector(variant)
        self.lock = threading.Lock()
        for topic, cls in (("/brace/replan_calls", ReplanCall), ("/brace/decisions", ReplanDecision),
                           ("/brace/plan", Plan), ("/brace/episode", Episode)):
            self.create_subscription(cls, topic, lambda m, t=topic: self.on_message(t, m),
                                     qos.PLANS if topic == "/brace/plan" else qos.EVENTS)

    def on_message(self, topic: str, msg) -> None:
        """Add one message with its receive time."""
        with self.lock:
            self.collector.add(topic, msg, self.get_clock().now().nanoseconds)


def _progress(variant: str, sim, collector: LiveCollector, started: float, episodes: int) -> str:
    calls = collector.collector.records.calls
    missed = sum(not c.slo_met for c in calls)
    step = sim.world.t if sim.world is not None else 0
    return (f"[{variant}] episode {max(sim.episode, 0) + 1}/{episodes} step {step:3d} | calls {len(calls):3d} "
            f"SLO missed {missed:3d} | {time.monotonic() - started:5.0f} s")


def _drain(executor, recorder, collector: LiveCollector, episodes: int, settle_s: float = 1.0,
           limit_s: float = 30.0) -> None:
    """Spin until the recorder and the collector hold every episode's end (the last messages of a run).

    At least `settle_s` (calls and decisions still in flight), at most `limit_s`; a fixed wait alone lost the
    last episode's end from the bag on a loaded machine.
    """
    started = time.monotonic()

    def complete() -> bool:
        ends = recorder.writer.topics.get("/brace/episode") if recorder.writer is not None else None
        with collector.lock:
            collected = len(collector.collector.records.episodes)
        return collected >= episodes and (ends is None or ends.count >= 2 * episodes)

    while time.monotonic() - started < limit_s and (time.monotonic() - started < settle_s or not complete()):
        executor.spin_once(timeout_sec=0.05)


def run_variant(cfg: RunConfig, variant: str, folder: Path, extra: dict[str, dict], quiet: bool = False):
    """Run one variant to completion; return its live RunRecords and bag path."""
    from brace_controller.audit_recorder_node import AuditRecorderNode
    from brace_controller.controller_node import BraceControllerNode
    from brace_controller.trigger_monitor_node import TriggerMonitorNode
    from erecap_planner.planner_node import ErecapPlannerNode

    from .sim_node import EmbeddedSimNode

    folder.mkdir(parents=True, exist_ok=True)
    params = cfg.parameters(variant, extra)
    params["audit_recorder"]["output_dir"] = str(folder / "bag")
    params["embedded_sim"]["variant"] = variant
    params["embedded_sim"].setdefault("agents", 4)
    agents = int(params["embedded_sim"]["agents"])
    params["trigger_monitor"]["agents"] = [f"agent_{i}" for i in range(agents)]
    if str(params["erecap_planner"].get("action_schema_file", "")).endswith("warehouse_actions.yaml") and agents != 4:
        from .feed import action_schema
        from .warehouse import Warehouse, WorldConfig

        schema_file = folder / "warehouse_actions.yaml"  # the shipped schema is K = 4's; this world's entities
        schema_file.write_text(yaml.safe_dump(action_schema(Warehouse(WorldConfig(agents=agents))), sort_keys=False))
        params["erecap_planner"]["action_schema_file"] = str(schema_file)
    params_file = folder / "params.yaml"
    params_file.write_text(yaml.safe_dump({n: {"ros__parameters": v} for n, v in params.items()}, sort_keys=False))

    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(params_file)], context=context)
    nodes = []
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    try:
        recorder = AuditRecorderNode(context=context)
        collector = LiveCollector(variant, context=context)
        planner = ErecapPlannerNode(context=context)
        planner.trigger_configure()
        if planner.call_path is None:
            raise ConfigError("erecap_planner", planner.last_error)
        planner.trigger_activate()
        monitor = TriggerMonitorNode(context=context)
        controller = BraceControllerNode(context=context)
        nodes = [recorder, collector, planner, monitor, controller]
        for n in nodes:
            executor.add_node(n)
        # Let every subscription match before the world starts publishing.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        sim = EmbeddedSimNode(context=context)
        nodes.append(sim)
        executor.add_node(sim)
        started, last_print = time.monotonic(), 0.0
        episodes = sim.config.episodes
        while not sim.done and context.ok():
            executor.spin_once(timeout_sec=0.05)
            if not quiet and time.monotonic() - last_print > (1.0 if sys.stdout.isatty() else 15.0):  # logs: sparse
                line = _progress(variant, sim, collector, started, episodes)
                print("\r" + line if sys.stdout.isatty() else line, end="" if sys.stdout.isatty() else "\n",
                      flush=True)
                last_print = time.monotonic()
        _drain(executor, recorder, collector, len(sim.results))
        if not quiet:
            print(("\r" if sys.stdout.isatty() else "") + _progress(variant, sim, collector, started, episodes)
                  + " done", flush=True)
        recorder.close()
        return collector.collector.records, recorder.path, sim.results
    finally:
        executor.shutdown()
        for n in nodes:
            n.destroy_node()
        context.try_shutdown()


def plots(runs, folder: Path) -> list[Path]:
    """latency_cdf.png (per-variant CDF with the SLO line) and slo_violation.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from brace_controller.audit_report import summary

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


def run(cfg: RunConfig, variants: list[str], output: Path, extra: dict[str, dict], quiet: bool = False):
    """Every variant in order; write CSV and plots; return (run folder, live records per variant)."""
    from brace_controller.audit import write_csvs

    folder = output / time.strftime("%Y%m%d_%H%M%S")
    runs = []
    for variant in variants:
        records, _bag, _results = run_variant(cfg, variant, folder / variant, extra, quiet)
        runs.append(records)
    write_csvs(runs, folder)
    plots(runs, folder)
    return folder, runs


def main(argv=None) -> int:
    """`brace-run config/runs/demo.yaml [--variants ...] [--episodes N] [--agents K]`."""
    from brace_controller.audit_report import report

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
    variants = args.variants or list(cfg.variants)
    missing = [v for v in variants if v not in cfg.variants]
    if missing:
        print(f"brace-run: unknown variants {missing}; the config has {list(cfg.variants)}", file=sys.stderr)
        return 2
    extra = {"embedded_sim": {k: v for k, v in (("episodes", args.episodes), ("agents", args.agents)) if v}}
    for item in args.set:
        key, sep, value = item.partition("=")
        node, dot, param = key.partition(".")
        if not sep or not dot or node not in NODES or not param:
            print(f"brace-run: --set '{item}' is not NODE.PARAM=VALUE with NODE one of {', '.join(NODES)}",
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
