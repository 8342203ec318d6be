"""PickFruit (BRACE Table 32), as a world beside the CAN twin: fruits on a table, a bowl, grasps that slip.

ROS-free. `PickFruitWorld` follows the twin's tool point and gripper (grasps, carries, releases, slips, and the
verifier's hand and phantom faults); `TwinPolicy` is the /act stand-in for the executor's instructions. The rules:
docs/piper_twin.md, "twin_world: episodes on the twin".
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from brace_common.episode import DURATION_S, GRASPS, SLIPS, EpisodeMetrics, failure_metrics
from brace_common.vocabulary import Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState

Point = tuple[float, float, float]

HOME_JOINTS = (0.0, 1.5, -1.3, 0.0, 1.0, 0.0)
"""Where the twin arm starts every episode (rad): the tool 0.31 m ahead, 0.32 m up, above the PickFruit table."""
HOME_GRIPPER_M = 0.07
"""The twin gripper's width at the start of every episode (m): open."""

SKILLS_TEXT = ("Skills: pick(object) grasps an object on the table; place(object, target) puts the held "
               "object on the target. A grasp may slip: then pick the object again.")
"""The constraints entry of a PickFruit episode (what the planner may call)."""


def task_text(fruit: str) -> str:
    """The task entry for one fruit of the episode."""
    return f"Put the {fruit} in the bowl."


def scene_text(lines: Sequence[str]) -> str:
    """The state entry for the scene lines of `PickFruitWorld.describe`."""
    return "Scene: " + "; ".join(lines) + "."


@dataclass(frozen=True)
class PickFruitConfig:
    """The table, the fruits, the bowl and how grasps slip (metres, base_link)."""

    fruits: tuple[str, ...] = ("apple", "banana", "orange")
    widths_m: tuple[float, ...] = (0.045, 0.035, 0.05)   # what the gripper closes on, per fruit
    tasks: int = 1                                        # fruits to put in the bowl per episode
    table_z_m: float = 0.12                               # the grasp height of a fruit on the table
    area_x_m: tuple[float, float] = (0.22, 0.31)         # where fruits lie
    area_y_m: tuple[float, float] = (-0.12, 0.02)
    min_spacing_m: float = 0.05
    bowl: Point = (0.25, 0.12, 0.12)
    bowl_radius_m: float = 0.05
    grasp_radius_m: float = 0.02                           # tool within this of a fruit's centre closes on it
    slip_probability: float = 0.35                         # per grasp: the fruit slips somewhere on the carry
    slip_after_m: tuple[float, float] = (0.08, 0.16)       # where: carried distance (the lift is 0.06 m)
    open_margin_m: float = 0.004                           # an opening this far past the width releases the fruit
    hand_probability: float = 0.0                          # per episode: a hand takes the first task fruit away
    hand_reach_m: float = 0.07                             # ... as the tool comes this near it
    hand_visible_s: float = 0.6                            # the hand is in view this long (world clock)
    phantom_probability: float = 0.0                       # per grasp: the gripper stops at the width, holding nothing

    def __post_init__(self) -> None:
        if len(self.widths_m) != len(self.fruits) or not self.fruits:
            raise ValueError(f"{len(self.fruits)} fruits need as many widths, got {len(self.widths_m)}")
        if not 1 <= self.tasks <= len(self.fruits):
            raise ValueError(f"tasks must be 1..{len(self.fruits)}, got {self.tasks}")
        for name in ("slip_probability", "hand_probability", "phantom_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def width(self, fruit: str) -> float:
        """The width (m) the gripper closes to on `fruit`."""
        return self.widths_m[self.fruits.index(fruit)]


@dataclass
class Fruit:
    """One fruit: where it is, whether it is held or in the bowl."""

    name: str
    position: Point
    width_m: float
    held: bool = False
    in_bowl: bool = False
    slip_after_m: Optional[float] = None   # carry distance after which the current grasp slips (None: it holds)
    carried_m: float = 0.0
    removed: bool = False                  # a hand took it away: not in the scene any more


@dataclass
class WorldCounts:
    """What happened in an episode (the world's view: grasps, slips, releases)."""

    grasps: int = 0
    slips: int = 0
    releases: int = 0
    in_bowl: int = 0
    hands: int = 0          # fruits a hand took away
    phantoms: int = 0       # grasps that closed on nothing at a fruit's width


class PickFruitWorld:
    """The PickFruit table; thread-safe (the twin's thread calls `grasp`, the node reads snapshots)."""

    def __init__(self, config: PickFruitConfig = PickFruitConfig(), clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.hand_armed = False                     # this episode's hand has yet to come
        self.hand: Optional[tuple[Point, float]] = None   # where the hand reached in, and when (clock)
        self.phantom: Optional[str] = None          # the fruit a phantom grasp pretends to hold
        self.lock = threading.Lock()
        self.fruits: dict[str, Fruit] = {}
        self.task: tuple[str, ...] = ()
        self.counts = WorldCounts()
        self.rng = random.Random(0)
        self._last_tool: Optional[Point] = None
        self._last_gripper: Optional[float] = None

    def reset(self, seed: int) -> tuple[str, ...]:
        """A new episode: fruits placed at seeded positions; returns the fruits to put in the bowl."""
        cfg = self.config
        rng = random.Random(seed)
        with self.lock:
            self.rng = rng
            self.fruits = {}
            placed: list[Point] = []
            for name, width in zip(cfg.fruits, cfg.widths_m, strict=True):
                for _ in range(200):
                    p = (rng.uniform(*cfg.area_x_m), rng.uniform(*cfg.area_y_m), cfg.table_z_m)
                    if all(math.dist(p[:2], q[:2]) >= cfg.min_spacing_m for q in placed):
                        break
                placed.append(p)
                self.fruits[name] = Fruit(name, p, width)
            self.task = tuple(rng.sample(list(cfg.fruits), k=min(cfg.tasks, len(cfg.fruits))))
            self.counts = WorldCounts()
            self.hand_armed = rng.random() < cfg.hand_probability
            self.hand, self.phantom = None, None
            self._last_tool = self._last_gripper = None
            return self.task

    # ------------------------------------------------------------------ the twin's hook

    def grasp(self, tool: Point, gripper_m: float) -> Optional[float]:
        """Advance the world to the tool point and opening; the width the gripper closes on, or None."""
        cfg = self.config
        with self.lock:
            moved = math.dist(tool, self._last_tool) if self._last_tool is not None else 0.0
            opened = self._last_gripper if self._last_gripper is not None else gripper_m   # the opening a call ago
            self._last_tool, self._last_gripper = tool, gripper_m
            if self.phantom is not None:
                width = self.fruits[self.phantom].width_m
                if gripper_m > width + cfg.open_margin_m:
                    self.phantom = None                                 # opened: the pretence ends
                    return None
                return width
            self._hand(tool)
            held = next((f for f in self.fruits.values() if f.held), None)
            if held is not None:
                if gripper_m > held.width_m + cfg.open_margin_m:      # opened: released
                    self._release(held, tool)
                    return None
                held.carried_m += moved
                if held.slip_after_m is not None and held.carried_m >= held.slip_after_m:
                    self.counts.slips += 1
                    self._release(held, tool)                          # it slipped: the gripper closes on nothing
                    return None
                held.position = tool
                return held.width_m
            near = [f for f in self.fruits.values()
                    if not f.in_bowl and not f.removed and math.dist(tool, f.position) <= cfg.grasp_radius_m]
            if not near:
                return None
            fruit = min(near, key=lambda f: math.dist(tool, f.position))
            if max(opened, gripper_m) < fruit.width_m - 1e-4:   # fingers narrower than it came onto it: not around it
                return None
            if gripper_m <= fruit.width_m + 1e-4 and self.rng.random() < cfg.phantom_probability:
                self.phantom = fruit.name                               # closed at its width, holding nothing
                self.counts.phantoms += 1
                return fruit.width_m
            if gripper_m <= fruit.width_m + 1e-4:                      # closed on it: a grasp
                fruit.held, fruit.carried_m = True, 0.0
                fruit.slip_after_m = self.rng.uniform(*cfg.slip_after_m) if self.rng.random() < cfg.slip_probability else None
                self.counts.grasps += 1
            return fruit.width_m

    def _hand(self, tool: Point) -> None:
        """The armed hand takes the first task fruit as the tool comes near it."""
        if not self.hand_armed or not self.task:
            return
        fruit = self.fruits[self.task[0]]
        if fruit.held or fruit.in_bowl or math.dist(tool, fruit.position) > self.config.hand_reach_m:
            return
        self.hand_armed = False
        self.hand = (fruit.position, self.clock())
        fruit.removed = True
        self.counts.hands += 1

    def hand_in_view(self) -> Optional[Point]:
        """Where the hand is while it is in view (None otherwise)."""
        with self.lock:
            if self.hand is None or self.clock() - self.hand[1] > self.config.hand_visible_s:
                return None
            return self.hand[0]

    def _release(self, fruit: Fruit, tool: Point) -> None:
        fruit.held = False
        fruit.slip_after_m = None
        over_bowl = math.dist(tool[:2], self.config.bowl[:2]) <= self.config.bowl_radius_m
        fruit.position = (tool[0], tool[1], self.config.bowl[2] if over_bowl else self.config.table_z_m)
        fruit.in_bowl = over_bowl
        self.counts.releases += 1
        self.counts.in_bowl = sum(f.in_bowl for f in self.fruits.values())

    # ------------------------------------------------------------------ reading the world

    def snapshot(self) -> dict[str, Fruit]:
        """A copy of every fruit."""
        with self.lock:
            return {name: Fruit(**vars(f)) for name, f in self.fruits.items()}

    def delivered(self) -> int:
        """Fruits of the task in the bowl."""
        with self.lock:
            return sum(self.fruits[name].in_bowl for name in self.task if name in self.fruits)

    def success(self) -> bool:
        """Every fruit of the task is in the bowl (and none is held)."""
        return bool(self.task) and self.delivered() == len(self.task)

    def describe(self) -> list[str]:
        """The scene as a perception module would report it, one line per object (for the planner's context)."""
        lines = []
        for f in self.snapshot().values():
            if f.removed:
                continue
            where = "in the bowl" if f.in_bowl else "in the gripper" if f.held else \
                f"on the table at x={f.position[0]:.2f} y={f.position[1]:.2f}"
            lines.append(f"{f.name} {where}")
        bx, by, _ = self.config.bowl
        lines.append(f"bowl on the table at x={bx:.2f} y={by:.2f}")
        return lines


WORLD = "pickfruit"
"""Episode.world and WorldState.world of PickFruit."""


def episode_metrics(world: PickFruitWorld, duration_s: float, steps: int, failures: Mapping[str, int]) -> EpisodeMetrics:
    """PickFruit's verdict on an episode with Table 32's measurements: duration, grasps, slips and failed steps by
    category (`failures`: Failure label -> count; every category is counted, so each is published)."""
    counts = world.counts
    measured = {DURATION_S: round(duration_s, 2), GRASPS: counts.grasps, SLIPS: counts.slips,
                **failure_metrics(failures)}
    return EpisodeMetrics(success=world.success(), steps=steps, delivered=world.delivered(), tasks=len(world.task),
                          metrics=measured)


def world_state(world: PickFruitWorld, episode: int, step: int, activity: AgentActivity, tool: Point,
                gripper_m: float) -> WorldState:
    """The PickFruit table as a scene graph, poses in base_link (m).

    Entities: the arm (its pose is the tool point; gripper_m), the fruits (state held, in_bowl, on_table or removed;
    width_m), the bowl and the table, and one task per fruit to put in the bowl (open, done). Relations: arm
    holding fruit, fruit in bowl, fruit on table, arm assigned task, task concerns fruit, task target bowl.
    """
    arm = activity.agent_id
    entities = [Entity(arm, "arm", "", Pose(*map(float, tool)), {"gripper_m": f"{gripper_m:.4f}"})]
    relations: list[Relation] = []
    for f in world.snapshot().values():
        if f.removed:   # a hand took it: the task still names it, nothing relates it to the table any more
            entities.append(Entity(f.name, "fruit", "removed", Pose(*f.position), {"width_m": f"{f.width_m:g}"}))
            continue
        state = "held" if f.held else "in_bowl" if f.in_bowl else "on_table"
        entities.append(Entity(f.name, "fruit", state, Pose(*f.position), {"width_m": f"{f.width_m:g}"}))
        relations.append(Relation(arm, Predicate.HOLDING, f.name) if f.held else
                         Relation(f.name, Predicate.IN, "bowl") if f.in_bowl else Relation(f.name, Predicate.ON, "table"))
    cfg = world.config
    entities.append(Entity("bowl", "container", "", Pose(*cfg.bowl), {"radius_m": f"{cfg.bowl_radius_m:g}"}))
    entities.append(Entity("table", "table"))
    fruits = world.snapshot()
    for fruit in world.task:
        task = f"task_{fruit}"
        done = fruit in fruits and fruits[fruit].in_bowl
        entities.append(Entity(task, "task", "done" if done else "open", attributes={"text": task_text(fruit)}))
        relations += [Relation(arm, Predicate.ASSIGNED, task), Relation(task, Predicate.CONCERNS, fruit),
                      Relation(task, Predicate.TARGET, "bowl")]
    return WorldState(WORLD, episode, step, tuple(entities), tuple(relations), (activity,))


@dataclass(frozen=True)
class PolicyConfig:
    """How the stand-in policy moves: bounded steps toward waypoints above and at the objects."""

    max_step_m: float = 0.02         # per action (the executor scales and limits again)
    approach_m: float = 0.06         # above a fruit or the bowl before descending / releasing
    tolerance_m: float = 0.008       # a waypoint is reached within this


@dataclass
class TwinPolicy:
    """The `/act` stand-in: instruction + world + the tool point -> a 7-D action (dxyz m, drpy rad, gripper 1 open)."""

    world: PickFruitWorld
    tool: Callable[[], Point]        # the twin's current tool point (x, y, z)
    config: PolicyConfig = field(default_factory=PolicyConfig)

    def start_over(self) -> None:
        """The executor gave the instruction anew: nothing to forget, the policy reads the world at every call."""

    def __call__(self, image: np.ndarray, instruction: str, unnorm_key: str = "") -> np.ndarray:
        """The action for `instruction` now; ValueError when the instruction names no fruit."""
        text = instruction.lower()
        fruits = self.world.snapshot()
        named = [name for name in fruits if name in text]
        if not named:
            raise ValueError(f"no known object in instruction {instruction!r}")
        fruit = fruits[named[0]]
        tool = self.tool()
        placing = "bowl" in text and ("put" in text or "place" in text)
        if placing:
            target, gripper = self._place(fruit, tool)
        else:
            target, gripper = self._pick(fruit, tool)
        delta = np.subtract(target, tool)
        norm = float(np.linalg.norm(delta))
        if norm > self.config.max_step_m:
            delta = delta * (self.config.max_step_m / norm)
        return np.array([*delta, 0.0, 0.0, 0.0, gripper], dtype=np.float64)

    def _pick(self, fruit: Fruit, tool: Sequence[float]) -> tuple[Point, float]:
        cfg = self.config
        if fruit.held:
            return (tool[0], tool[1], self.world.config.table_z_m + cfg.approach_m), 0.0   # lift to the carry height
        above = (fruit.position[0], fruit.position[1], fruit.position[2] + cfg.approach_m)
        if math.dist(tool[:2], fruit.position[:2]) > cfg.tolerance_m and tool[2] < above[2] - cfg.tolerance_m:
            return (tool[0], tool[1], above[2]), 1.0       # rise before moving sideways
        if math.dist(tool[:2], fruit.position[:2]) > cfg.tolerance_m:
            return above, 1.0
        if math.dist(tool, fruit.position) > cfg.tolerance_m:
            return fruit.position, 1.0                     # descend, open
        return fruit.position, 0.0                         # at the fruit: close

    def _place(self, fruit: Fruit, tool: Sequence[float]) -> tuple[Point, float]:
        cfg = self.config
        bowl = self.world.config.bowl
        above = (bowl[0], bowl[1], bowl[2] + cfg.approach_m)
        if not fruit.held:
            return tuple(tool), 1.0                        # nothing to carry: open, stay
        if math.dist(tool, above) > cfg.tolerance_m:
            return above, 0.0
        return above, 1.0                                  # over the bowl: release
