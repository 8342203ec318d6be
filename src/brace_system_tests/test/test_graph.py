"""The sim stack as `ros2 launch` starts it: every executable its own process, all at once, in no order.

The processes start back to back with the run's one parameter file in the
stack's namespace, the simulator first and the planner (seconds of imports
and model loading) last. Readiness is the graph's: the simulator must not
step before its peers are up, or the episodes end with no plans. The bag the
recorder process writes must hold every episode's plans.
"""

from __future__ import annotations

import os

from graph_run import VARIANT, check_bag, run_all_at_once, tiny_run_config

from brace_bringup.run_config import RunConfig
from brace_common.domain_leases import fresh_domain
from brace_common.testing import worst_order

SIM_TIMEOUT_S = 300.0


def test_every_process_at_once_closes_the_loop(tmp_path):
    cfg = RunConfig.load(tiny_run_config(tmp_path))
    folder = tmp_path / "run" / VARIANT
    params = cfg.write_parameters(VARIANT, folder)
    env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain())}
    # The worst order: the simulator first, the planner last, nobody waiting for anybody.
    order = worst_order(cfg.stack.nodes, "embedded_sim")
    codes, tails = run_all_at_once(order, params, env, tmp_path, "embedded_sim", SIM_TIMEOUT_S)
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items()}
    assert "waiting for" in tails["embedded_sim"], "the simulator started before its peers and did not wait"
    check_bag(folder / "bag")
