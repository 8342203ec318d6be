"""What the drone intersection tells the rest of the stack: context entries, outcomes, agent states, plans in.

ROS-free. Blocks follow the planner's context layout (paper Eq. 3) as the warehouse's feed does: the task,
each drone's route and the rules open an episode (protected), the tower's crossing order and a drone's
"cleared" notice to the drone after it are coordination (protected), each drone's latest state is its state
(protected), a landed drone's task is a task entry, and outcomes, failures, gusts, near-miss broadcasts and a
periodic state log are history (prunable): the context grows with time and with K.
"""

from __future__ import annotations

from typing import Optional

from brace_common.action_schema import Fault, PlanError, Step
from brace_common.vocabulary import Block, EntryKind
from brace_common.world_feed import AgentReport, FeedEntry

from ..warehouse.warehouse_feed import MAX_PLAN_STEPS, event_entries, state_entries
from .drone_world import DroneWorld, Event
from .intersection import TOWER, IntersectionConfig, drone_schema, in_box, same_step


def _p(x: float, y: float, z: float) -> str:
    return f"({x:.1f}, {y:.1f}, {z:.1f})"


def episode_entries(world: DroneWorld, episode: int) -> list[FeedEntry]:
    """Task, route, rule and crossing-order entries that open an episode."""
    cfg = world.cfg
    z = -cfg.cruise_altitude_m
    out = [FeedEntry(TOWER, 0, Block.TASK, EntryKind.TASK.value,
                     f"AirSim intersection episode {episode}, {len(world.drones)} drones. World NED metres: x north, "
                     f"y east, z down (z = {z:.0f} is {cfg.cruise_altitude_m:.0f} m up). The intersection is the box "
                     f"|x| < {cfg.box_m:.0f}, |y| < {cfg.box_m:.0f}.")]
    for name in world.order():
        r = world.drones[name].route
        out.append(FeedEntry(name, 0, Block.TASK, EntryKind.TASK.value,
                             f"{name} comes from the {r.approach}: cross the intersection, then land at its goal "
                             f"x = {r.goal[0]:.0f}, y = {r.goal[1]:.0f}; fly at z = {z:.0f}, "
                             f"speed {cfg.cruise_speed_mps:.0f}. It holds at x = {r.hold[0]:.0f}, "
                             f"y = {r.hold[1]:.0f} when it yields."))
    out.append(FeedEntry(TOWER, 0, Block.CONSTRAINTS, EntryKind.CONSTRAINT.value,
                         f"Keep {cfg.hazard_distance_m:.0f} m from other drones. Enter the intersection only after the drone "
                         "before you in the crossing order has cleared it: yield_to that drone first, then move_to "
                         "your goal, then land."))
    order = world.order()
    for i, name in enumerate(order):
        text = (f"tower -> {name}: you cross first" if i == 0 else
                f"tower -> {name}: you cross after {order[i - 1]}")
        out.append(FeedEntry(TOWER, 0, Block.COORDINATION, EntryKind.MESSAGE.value, text))
    return out


def state_text(world: DroneWorld, name: str) -> str:
    """A drone's observation as the planner reads it."""
    d = world.drones[name]
    x, y, z = d.position
    if d.done:
        where = "landed at its goal"
    elif d.landed_state == 0:
        where = "on the ground"
    elif in_box(world.cfg, x, y):
        where = "in the intersection"
    elif d.route.progress(x, y) > 0:
        where = "past the intersection"
    else:
        where = "before the intersection"
    nxt = d.current.values_text() if d.current else "no plan"
    return f"{name} at {_p(x, y, z)}, {where}, next {nxt}"


def step_entries(world: DroneWorld, events: list[Event], observe_every: int) -> list[FeedEntry]:
    """Entries of one step: outcomes, failures, broadcasts as history; addressed messages as coordination; landed
    tasks; states."""
    return event_entries(events) + state_entries(world.t, {n: state_text(world, n) for n in world.drones},
                                                 observe_every)


def ned_to_enu(p: tuple[float, float, float]) -> tuple[float, float, float]:
    """AirSim's NED (x north, y east, z down) as ROS's ENU (x east, y north, z up)."""
    return (p[1], p[0], -p[2])


def agent_reports(world: DroneWorld) -> list[AgentReport]:
    """Every drone's state after the current step, positions in ENU (ROS frames; the planner's text is NED)."""
    out = []
    for n, d in sorted(world.drones.items()):
        x, y, z = ned_to_enu(d.position)
        out.append(AgentReport(n, world.t, x, y, world.tracking_error(n), d.current is not None, z))
    return out


DRONE_REASONS = {reason: "bad_parameter" for reason in (
    Fault.UNKNOWN_PARAMETER, Fault.BAD_PARAMETER_TYPE, Fault.BAD_PARAMETER_VALUE, Fault.OUT_OF_RANGE,
    Fault.UNKNOWN_CHOICE, Fault.NAMES_SELF)}
"""The drone world counts every refused parameter value as bad_parameter."""


def plan_from_steps(raw: list[tuple[str, str]], cfg: IntersectionConfig, agent: Optional[str] = None) -> list[Step]:
    """Drone steps (of drone `agent`, when given: it yields to other drones only) from (action, parameters_json)
    pairs, checked against the drone skills of scenario `cfg`; InvalidInput naming what is wrong (nothing moves on a
    bad plan; an empty plan clears the drone's)."""
    try:
        return drone_schema(cfg).plan_from_pairs(raw, max_steps=MAX_PLAN_STEPS, allow_empty=True, agent=agent)
    except PlanError as exc:
        raise exc.renamed(DRONE_REASONS) from None


def agrees_with_oracle(world: DroneWorld, name: str, plan: list[Step]) -> bool:
    """The plan's first step is the oracle's first step from the true state."""
    oracle = world.oracle_plan(name)
    if not plan or not oracle:
        return not plan and not oracle
    return same_step(plan[0], oracle[0])
