"""A Foxglove layout for the stack's bags and live graphs: Foxglove opens the audit bags (MCAP, ros2msg schemas) as
they are, and connects to a running stack through foxglove_bridge.

The layout (foxglove-sdk's layout types): the markers in a 3-D panel on the left; on the right the latency of every
call against its SLO_t, tokens before / after and B_t, and tabs with the decisions, the triggers, the latest call and
the diagnostics. Topics are the stack's in `namespace` (/brace, as launch and brace-run put it).

    python -m brace_audit.foxglove_layout [--namespace /brace] > brace_layout.json
"""

from __future__ import annotations

import argparse
import json
import sys

import foxglove.layouts as fl

from brace_common import names

SLO_COLOUR = "#ff00ff"
"""The SLO_t line, as the Rerun viewer draws it."""


def _topic(namespace: str, relative: str) -> str:
    return f"/{namespace.strip('/')}/{relative}" if namespace.strip("/") else f"/{relative}"


def layout(namespace: str = names.DEFAULT_NAMESPACE) -> fl.Layout:
    """The layout for a stack in `namespace`."""
    calls, decisions = _topic(namespace, names.REPLAN_CALLS), _topic(namespace, names.DECISIONS)

    def series(path: str, label: str, colour: str | None = None) -> fl.PlotSeries:
        return fl.PlotSeries(value=path, label=label, color=colour, timestamp_method="receiveTime")

    latency = fl.PlotPanel(title="call latency vs SLO_t (ms)", config=fl.PlotConfig(paths=[
        series(f"{calls}.latency_ms", "latency"), series(f"{calls}.slo_ms", "SLO_t", SLO_COLOUR)], show_legend=True))
    tokens = fl.PlotPanel(title="tokens and B_t", config=fl.PlotConfig(paths=[
        series(f"{calls}.tokens_before", "tokens before"), series(f"{calls}.tokens_after", "tokens after"),
        series(f"{decisions}.token_budget", "B_t")], show_legend=True))
    tables = fl.TabContainer(tabs=[
        fl.TabItem(title="decisions", content=fl.TablePanel(config=fl.TableConfig(topic_path=decisions))),
        fl.TabItem(title="triggers", content=fl.TablePanel(config=fl.TableConfig(
            topic_path=_topic(namespace, names.TRIGGERS)))),
        fl.TabItem(title="latest call", content=fl.RawMessagesPanel(config=fl.RawMessagesConfig(topic_path=calls))),
        fl.TabItem(title="diagnostics", content=fl.DiagnosticsSummaryPanel(config=fl.DiagnosticsSummaryConfig(
            topic_to_render=names.DIAGNOSTICS)))])
    scene = fl.ThreeDeePanel(title="scene (markers)", config=fl.ThreeDeeConfig(topics={
        _topic(namespace, names.MARKERS): fl.BaseRendererRosMarkerTopicSettings(visible=True)}))
    right = fl.SplitContainer(direction="column", items=[
        fl.SplitItem(proportion=2, content=latency), fl.SplitItem(proportion=2, content=tokens),
        fl.SplitItem(proportion=3, content=tables)])
    return fl.Layout(content=fl.SplitContainer(direction="row", items=[
        fl.SplitItem(proportion=3, content=scene), fl.SplitItem(proportion=2, content=right)]))


def layout_json(namespace: str = names.DEFAULT_NAMESPACE) -> str:
    """The layout as the file Foxglove imports (indented)."""
    return json.dumps(json.loads(layout(namespace).to_json()), indent=1) + "\n"


def main(argv=None) -> int:
    """Print the layout."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--namespace", default=names.DEFAULT_NAMESPACE, help="the stack's namespace (default /brace)")
    sys.stdout.write(layout_json(ap.parse_args(argv).namespace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
