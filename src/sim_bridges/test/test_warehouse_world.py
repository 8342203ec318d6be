"""Embedded warehouse core: determinism, oracle-driven success, failures, drift, hazards, metrics."""

from __future__ import annotations

import copy

import pytest

from brace_common.action_schema import Step
from brace_common.vocabulary import Activity
from brace_common.world_state import Pose, Relation
from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig, lookahead, run_oracle, world_state


@pytest.mark.parametrize("agents", range(1, 9))
def test_every_agent_starts_alone_at_its_own_park(agents):
    world = Warehouse(WorldConfig(num_agents=agents, seed=0))
    cells = [a.pos for a in world.agents.values()]
    assert len(set(cells)) == agents == len(set(world.parks.values()))
    assert all(world.parks[f"park_{i}"] == world.agents[f"agent_{i}"].pos for i in range(agents))
    world.step()
    assert world.collisions == 0


def test_same_seed_same_episode():
    a, b = Warehouse(WorldConfig(num_agents=4, seed=7)), Warehouse(WorldConfig(num_agents=4, seed=7))
    run_oracle(a)
    run_oracle(b)
    assert a.snapshot() == b.snapshot() and a.metrics() == b.metrics()
    c = Warehouse(WorldConfig(num_agents=4, seed=8))
    run_oracle(c)
    assert c.snapshot() != a.snapshot()


@pytest.mark.parametrize("agents", [1, 2, 4, 8])
def test_oracle_policy_completes_most_episodes(agents):
    wins = 0
    for seed in range(6):
        world = Warehouse(WorldConfig(num_agents=agents, seed=seed, max_steps=200))
        run_oracle(world, replan_every=5)
        wins += world.success
        m = world.metrics()
        assert m.metric("collisions") == 0 and 0.0 <= m.metric("path_efficiency") <= 1.0
        assert "min_distance_m" not in m.metrics  # a grid world: no distance measured
    assert wins >= 4


def test_eight_agents_finish_on_the_aisles_floor_plan_where_the_compact_one_locks_them():
    """The aisles floor plan's parking row and wall docks (and the oracle's two rules there) let K = 8 finish within 80
    steps; on the compact one, agents parked on the upper aisle and agents crowding a corner dock lock seeds up."""
    finished = {}
    for plan in ("compact", "aisles"):
        worlds = [Warehouse(WorldConfig(num_agents=8, seed=seed, max_steps=80, floor_plan=plan)) for seed in range(20)]
        for world in worlds:
            run_oracle(world)
            assert world.collisions == 0
        finished[plan] = sum(world.success for world in worlds)
    assert finished["aisles"] == 20 and finished["compact"] < 18


def test_aisles_docks_are_in_the_wall_and_taken_from_the_aisle_above():
    world = Warehouse(WorldConfig(num_agents=8, floor_plan="aisles"))
    assert all(cell in world.walls and world.access(dock) == (cell[0], cell[1] - 1)
               for dock, cell in world.docks.items())
    assert all(cell[1] == 1 for cell in world.parks.values())              # the parking row
    assert not set(world.parks.values()) & {world.access(p) for p in (*world.shelves, *world.docks)}
    state = world_state(world, 0)
    world.agents["agent_0"].pos = world.access("dock_2")
    assert Relation("agent_0", "at", "dock_2") in world_state(world, 0).relations
    assert Relation("agent_0", "at", "dock_2") not in state.relations


def test_a_carrier_waits_parked_until_its_giver_holds_the_object_on_the_aisles_floor_plan():
    world = Warehouse(WorldConfig(num_agents=2, seed=0, floor_plan="aisles"))
    (task,) = world.tasks
    assert [s.action for s in world.oracle_plan(task.carrier)] == ["wait"]          # at its park already
    world.objects[task.obj], world.agents[task.giver].holding = None, task.obj
    assert world.oracle_plan(task.carrier)[0] == Step("move_to", {"target": task.dock})


def test_an_agent_next_to_a_boxed_in_dock_makes_way_on_the_aisles_floor_plan():
    world = Warehouse(WorldConfig(num_agents=4, seed=0, handoff_tasks=0, floor_plan="aisles"))
    dock = world.tasks[0].dock
    x, y = world.access(dock)
    names = list(world.agents)
    world.agents[names[0]].pos = (x, y)                                     # on the dock, on its way out
    for name, cell in zip(names[1:], [(x - 1, y), (x + 1, y), (x, y - 1)], strict=True):
        world.agents[name].pos = cell
        task = world.task_of(name)
        task.dock, world.agents[name].holding, world.objects[task.obj] = dock, task.obj, None
    assert world.oracle_plan(names[1]) == [Step("move_to", {"target": "park_1"}), Step("wait")]
    world.agents[names[3]].pos = (x, y - 2)                                 # a way out: nobody makes way
    assert world.oracle_plan(names[1])[0] == Step("move_to", {"target": dock})


@pytest.mark.parametrize("agents, handoffs", [(1, 1), (2, 1), (3, 1), (4, 2), (5, 8), (8, 0)])
def test_every_agent_takes_part_in_exactly_one_task(agents, handoffs):
    world = Warehouse(WorldConfig(num_agents=agents, seed=0, handoff_tasks=handoffs))
    roles = [name for t in world.tasks for name in (t.carrier, t.giver) if name]
    assert sorted(roles) == sorted(world.agents)
    pairs = [(t.giver, t.carrier) for t in world.tasks if t.giver]
    assert len(pairs) == min(handoffs, agents // 2)
    assert all(int(carrier.split("_")[1]) == int(giver.split("_")[1]) + 1 for giver, carrier in pairs)


def test_context_grows_with_time_and_agents():
    small, large = Warehouse(WorldConfig(num_agents=1, seed=0)), Warehouse(WorldConfig(num_agents=8, seed=0))
    assert len(run_oracle(small)[:0]) == 0
    assert len(small.step()) < len(large.step())


def test_grasp_failures_are_reported_as_failure_traces():
    world = Warehouse(WorldConfig(num_agents=1, seed=3, grasp_failure=1.0, handoff_tasks=0))
    events = run_oracle(world)
    assert not world.success
    assert any(e.kind == "failure_trace" and "slipped" in e.text and not e.success for e in events)


def test_drift_moves_objects_and_tells_the_agent_fetching_it():
    world = Warehouse(WorldConfig(num_agents=3, seed=1, drift=1.0, max_steps=1))
    before = dict(world.objects)
    events = [e for e in world.step() if e.agent == "supervisor"]
    fetchers = {t.obj: t.giver or t.carrier for t in world.tasks}
    assert events and len(events) == sum(shelf is not None for shelf in before.values())
    for e in events:
        obj = e.text.split(": ")[-1].split()[0]
        assert world.objects[obj] != before[obj]
        assert e.kind == "message" and e.to == fetchers.get(obj, "")
        assert e.text == (f"supervisor -> {e.to}: " if e.to else "") + f"{obj} was moved from {before[obj]} to " \
            f"{world.objects[obj]}"


def test_hazards_counted_when_agents_are_adjacent():
    world = Warehouse(WorldConfig(num_agents=2, seed=0))
    world.agents["agent_1"].pos = (world.agents["agent_0"].pos[0] + 1, 1)
    world.step()
    assert world.near_misses >= 1


def test_bad_skills_fail_without_crashing():
    world = Warehouse(WorldConfig(num_agents=1, seed=0))
    world.set_plan("agent_0", [Step("teleport"), Step("move_to", {"target": "moon"}), Step("pick", {"object": "x"})])
    texts = [e.text for _ in range(3) for e in world.step() if not e.success]
    assert texts == ["unknown skill teleport", "unknown place moon", "pick x failed: not here"]


def test_one_task_dock_congests_the_team():
    """task_docks = 1: every task ends at dock_1, and agents stall behind each other far more often."""
    stalls = {}
    for docks in (0, 1):
        stalls[docks] = 0
        for seed in range(4):
            world = Warehouse(WorldConfig(num_agents=6, seed=seed, task_docks=docks))
            if docks:
                assert {t.dock for t in world.tasks} == {"dock_1"}
            stalls[docks] += sum("blocked on the way" in e.text for e in run_oracle(world, replan_every=10))
    assert stalls[1] > 2 * stalls[0]


@pytest.mark.parametrize("bad", [dict(num_agents=0), dict(num_agents=9), dict(grasp_failure=1.5), dict(max_steps=0),
                                 dict(task_docks=-1), dict(floor_plan="maze")])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        Warehouse(WorldConfig(**bad))


def test_set_plan_reports_changes():
    world = Warehouse(WorldConfig(num_agents=1, seed=0))
    plan = world.oracle_plan("agent_0")
    assert world.set_plan("agent_0", plan)
    assert not world.set_plan("agent_0", list(plan))


def test_giver_goes_to_its_park_once_the_carrier_holds_the_object():
    world = Warehouse(WorldConfig(num_agents=2, seed=0))
    task = world.tasks[0]
    world.agents[task.carrier].holding = task.obj
    world.objects[task.obj] = None
    world.agents[task.giver].pos = world.access(task.dock)
    assert world.oracle_plan(task.giver) == [Step("move_to", {"target": "park_0"}), Step("wait")]


# ---------------------------------------------------------------------- structured state and lookahead


def test_the_world_state_follows_an_oracle_episode():
    world = Warehouse(WorldConfig(num_agents=2, seed=3, grasp_failure=0.0, drift=0.0))
    state = world_state(world, 5)
    assert (state.world, state.episode, state.step) == ("warehouse", 5, 0)
    obj = world.tasks[0].obj
    assert state.entity(obj).state == "on_shelf"
    assert Relation(obj, "on", world.objects[obj]) in state.relations
    assert Relation("agent_0", "at", "park_0") in state.relations
    assert state.entity("task_0").state == "open" and Relation("task_0", "target", world.tasks[0].dock) in state.relations
    assert state.entity("agent_0").pose == Pose.planar(*world.agents["agent_0"].pos)
    assert state.activity("agent_0").activity == Activity.IDLE
    seen = set()
    for name in world.agents:
        world.set_plan(name, world.oracle_plan(name))
    assert world_state(world, 5).activity("agent_0").action == "move_to"
    while not world.finished:
        world.step()
        state = world_state(world, 5)
        seen |= {e.state for e in state.entities if e.type == "object"}
        for r in state.related("holding"):
            assert state.entity(r.object).state == "held"
            assert state.entity(r.object).pose == state.entity(r.subject).pose
        for name, agent in world.agents.items():
            if agent.current is None:
                world.set_plan(name, world.oracle_plan(name))
    assert world.success and {"on_shelf", "held", "delivered"} <= seen
    final = world_state(world, 5)
    assert all(e.state == "done" for e in final.entities if e.type == "task")
    assert Relation(obj, "at", world.tasks[0].dock) in final.relations


def test_near_agents_are_related():
    world = Warehouse(WorldConfig(num_agents=2, seed=0))
    world.agents["agent_1"].pos = (world.agents["agent_0"].pos[0] + 1, world.agents["agent_0"].pos[1])
    assert world_state(world, 0).related("near") == [Relation("agent_0", "near", "agent_1")]


def test_a_blocked_agent_and_a_waiting_one_say_so():
    world = Warehouse(WorldConfig(num_agents=2, seed=0))
    world.set_plan("agent_0", [Step("wait")])
    world.agents["agent_1"].stalled = 2
    world.set_plan("agent_1", [Step("move_to", {"target": "dock_1"})])
    state = world_state(world, 0)
    assert state.activity("agent_0").activity == Activity.WAITING
    assert state.activity("agent_1").activity == Activity.BLOCKED
    assert state.activity("agent_1").parameters_json == '{"target": "dock_1"}'


def candidates(world: Warehouse, agent: str) -> list[Step]:
    task = world.task_of(agent)
    return [*world.oracle_plan(agent)[:1], Step("pick", {"object": task.obj}), Step("wait"),
            Step("move_to", {"target": "dock_1"}), Step("place", {"object": task.obj, "target": task.dock}),
            Step("fly", {})]


@pytest.mark.parametrize("seed", range(4))
def test_lookahead_predicts_what_the_world_then_does_and_leaves_it_unchanged(seed):
    world = Warehouse(WorldConfig(num_agents=4, seed=seed, grasp_failure=0.0, drift=0.0))
    for name in world.agents:
        world.set_plan(name, world.oracle_plan(name))
    for _ in range(12):  # part-way into the episode: agents at shelves, some holding
        for name in ("agent_0", "agent_1"):
            for step in candidates(world, name):
                before, rng = world.snapshot(), world.rng.getstate()
                prediction = lookahead(world, 7, name, step)
                assert world.snapshot() == before and world.rng.getstate() == rng  # the live world did not change
                executed = copy.deepcopy(world)
                executed.set_plan(name, [step])
                events = [e for e in executed.step() if e.agent == name]
                assert prediction.state == world_state(executed, 7), (seed, world.t, name, step)
                assert prediction.valid == all(e.success for e in events), (step, prediction.reason)
        world.step()


def test_lookahead_says_why_a_step_cannot_run():
    world = Warehouse(WorldConfig(num_agents=2, seed=1, grasp_failure=0.0, drift=0.0))
    obj = world.tasks[0].obj
    prediction = lookahead(world, 0, "agent_0", Step("pick", {"object": obj}))
    assert not prediction.valid and "not here" in prediction.reason
    assert prediction.state.step == 1 and prediction.state.entity(obj).state == "on_shelf"
    unknown = lookahead(world, 0, "agent_9", Step("wait"))
    assert not unknown.valid and unknown.state is None


def test_lookahead_predicts_the_nominal_outcome_not_the_worlds_chance():
    world = Warehouse(WorldConfig(num_agents=1, seed=0, grasp_failure=1.0, drift=0.0))
    obj = world.tasks[0].obj
    world.agents["agent_0"].pos = world.access(world.objects[obj])
    prediction = lookahead(world, 0, "agent_0", Step("pick", {"object": obj}))
    assert prediction.valid and prediction.state.entity(obj).state == "held"
    world.set_plan("agent_0", [Step("pick", {"object": obj})])
    world.step()
    assert world_state(world, 0).entity(obj).state == "on_shelf"  # the grasp slipped: chance is not predicted


def test_loop_steps_count_states_held_before_the_previous_one():
    from brace_common.action_schema import Step
    from brace_common.episode import LOOP_STEPS
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    straight = Warehouse(WorldConfig(num_agents=1, seed=0, grasp_failure=0.0, drift=0.0))
    straight.set_plan("agent_0", straight.oracle_plan("agent_0"))
    while not straight.finished:
        straight.step()
    assert straight.success and straight.metrics().metrics[LOOP_STEPS] == 0
    detour = Warehouse(WorldConfig(num_agents=1, seed=0, grasp_failure=0.0, drift=0.0, max_steps=30))
    detour.set_plan("agent_0", [Step("move_to", {"target": "shelf_3"}), Step("move_to", {"target": "park_0"})])
    while not detour.finished:
        detour.step()
    # out to shelf_3 and back the same way: every cell of the way back but the turn is a revisit
    assert detour.agents["agent_0"].pos == detour.parks["park_0"]
    assert detour.metrics().metrics[LOOP_STEPS] == len(detour.path(detour.parks["park_0"], detour.access("shelf_3")))
