"""The real-robot graph on the CAN twin, short (issue 18): every node of the piper_twin stack in one process.

twin_world (CAN twin + PickFruit + /act stand-in), piper_arm over the real
piper_sdk, the camera replaying the packaged frames, the OpenVLA executor,
trigger monitor, controller, planner (a tiny random model: plans are valid
skill calls, not good ones) and the audit recorder. The loop must close: the
planner plans, the executor moves the twin through the arm node, outcomes and
Table 32 come out, the episode ends on time.
"""

from __future__ import annotations

import csv
import socket

from brace_audit.audit import records_from_bag
from brace_bringup.run_config import RunConfig
from brace_bringup.runner import run
from erecap_planner.testing import saved_tiny_llama


def test_the_twin_graph_closes_the_loop_and_prints_table_32(tmp_path, capsys):
    model = saved_tiny_llama(tmp_path / "tiny")
    cfg = RunConfig.load("piper_twin")  # the installed run configuration
    with socket.socket() as probe:  # a free port for the /act stand-in (the executor must know it beforehand)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    extra = {"twin_world": {"episodes": 1, "max_episode_s": 25.0, "act_port": port,
                            "can_port": f"twin_run_{port}"},
             "piper_arm": {"can_port": f"twin_run_{port}"},
             "erecap_planner": {"model_path": str(model), "adapter_path": "", "predictor_path": "",
                                "pruning_layers": [1, 3]}}
    extra["openvla_executor"] = {"server_url": f"http://127.0.0.1:{port}/act"}
    folder, runs = run(cfg, ["brace_erecap"], tmp_path / "runs", extra, quiet=True)
    (records,) = runs
    assert len(records.episodes) == 1
    assert records.calls and all(c.status == 0 for c in records.calls), [c.status for c in records.calls]
    assert records.plans, "no plan reached the executor's topic"
    out = capsys.readouterr().out
    assert "PickFruit on the PiPER CAN twin" in out and "brace_erecap" in out
    rows = list(csv.DictReader((folder / "episodes.csv").open()))
    assert len(rows) == 1 and float(rows[0]["duration_s"]) <= 40.0
    assert int(rows[0]["plans"]) >= 1, rows[0]  # the world saw the plans the executor runs
    bag, note = records_from_bag(folder / "brace_erecap" / "bag")
    assert note == ""
    assert len(bag.calls) == len(records.calls)
