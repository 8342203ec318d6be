"""The warehouse haystack: OmniAct's long-horizon context construction (App. E, Alg. 1) on the warehouse's
vocabulary, the cases of the constraint benchmark (bench/memory_haystack.py, OmniAct Table 1). ROS-free.

`make_cases` builds seeded cases: seed constraint episodes hidden among distractor events up to B tokens, then a
query whose two skill calls only the constraint tells apart. Construction and splits: docs/training.md.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Optional

from brace_common.action_schema import ActionSchema, Step
from brace_common.vocabulary import Block, EntryKind
from erecap_planner.context import Entry
from sim_bridges.warehouse.warehouse_world import SUPERVISOR

CONSTRAINT_KINDS = ("dock_closing", "handling", "relocation")
"""What a seed constraint is about: a dock that closes from a step on (deliver to the other dock), how a box must be
handled (a fragile one is handed to the helper, a sealed one placed by its carrier), an object whose shelf is under
maintenance or that was moved (fetch it from the other shelf)."""
SPLITS = ("train", "test")
"""Case id prefixes: the benchmark reads `test` cases, fine-tuning `train` cases."""
BASE_LENGTH_TOKENS = 96
"""L0: an event's base length in tokens (Alg. 1)."""
GAP_STEPS = 4
"""Δt: controller steps between two events (an event's entries take consecutive steps within it)."""
ALPHA_RANGE = (0.6, 1.6)
"""α_c ~ U(ALPHA_RANGE): a case's verbosity."""
LENGTH_RANGE = (0.5, 1.5)
"""ℓ ~ U(LENGTH_RANGE) · α_c · L0: an event's length."""
CONFLICT_SHARE = 0.15
"""Share of the irrelevant events that name a seed constraint's ids without contradicting it."""
AGENT_COUNT = (4, 8)
"""K is drawn in this range (inclusive)."""
SHELF_COUNT, DOCK_COUNT = 12, 6
"""shelf_1 .. shelf_12, dock_1 .. dock_6 (the warehouse's naming: places count from 1, parks from 0)."""
OBJECT_KINDS = ("box", "cup", "drill", "shoe", "can", "tray", "lamp", "book", "crate", "bin")
"""Object names are `<kind>_<n>`, as the warehouse's (`box_7`, `cup_3`)."""
MAX_BUDGET_TOKENS = 1_000_000
"""The largest B a case is built for."""
CASE_ID = re.compile(rf"^({'|'.join(SPLITS)})-({'|'.join(CONSTRAINT_KINDS)})-(\d{{4}})$")

CountTokens = Callable[[str], int]
"""Tokens of a text with the planner's tokenizer."""


@dataclass(frozen=True)
class HaystackCase:
    """One case: the opening entries (the warehouse's TASK and CONSTRAINTS framing), the history (seed episodes and
    irrelevant events in time order, block HISTORY), the query (the agent's task and state), and the two skill
    calls of its action schema. `constraint` is the queried seed constraint; `blind` cases lack it in the history
    (the control that shows chance)."""

    case_id: str
    kind: str
    budget_tokens: int
    agent_id: str
    opening: tuple[Entry, ...]
    history: tuple[Entry, ...]
    constraint: Entry
    query: tuple[Entry, ...]
    schema: ActionSchema
    compliant: Step
    violating: Step
    history_tokens: int
    alpha: float
    blind: bool = False

    @property
    def split(self) -> str:
        """The split the case id names."""
        return parse_case_id(self.case_id)[0]

    @property
    def step(self) -> int:
        """The query's controller step (after every history entry)."""
        return self.query[0].step

    @property
    def entries(self) -> tuple[Entry, ...]:
        """Every entry in the order it is streamed: opening, history, query."""
        return self.opening + self.history + self.query

    def satisfied(self, step: Optional[Step]) -> bool:
        """Whether the planner's skill call keeps the queried constraint."""
        return step is not None and (step.action, step.parameters) == (self.compliant.action,
                                                                        self.compliant.parameters)

    def without_constraint(self) -> HaystackCase:
        """The same case with the queried constraint's entry removed from the history (the blind control)."""
        return replace(self, history=tuple(e for e in self.history if e is not self.constraint), blind=True)


def case_id(split: str, kind: str, index: int) -> str:
    """`<split>-<kind>-<index>`, e.g. `test-dock_closing-0003`."""
    made = f"{split}-{kind}-{index:04d}"
    parse_case_id(made)
    return made


def parse_case_id(case: str) -> tuple[str, str, int]:
    """(split, kind, index) of a case id; ValueError when it is not one."""
    match = CASE_ID.fullmatch(case)
    if match is None:
        raise ValueError(f"'{case}' is not a case id (<{'|'.join(SPLITS)}>-<{'|'.join(CONSTRAINT_KINDS)}>-<NNNN>)")
    return match.group(1), match.group(2), int(match.group(3))


def case_ids(split: str, count: int, kinds: Sequence[str] = CONSTRAINT_KINDS, first: int = 0) -> list[str]:
    """`count` case ids per kind of `split`, indices `first` on."""
    return [case_id(split, kind, i) for kind in kinds for i in range(first, first + count)]


def case_rng(case: str) -> random.Random:
    """The case's random generator, seeded by the SHA-256 of its id (App. E)."""
    return random.Random(int.from_bytes(hashlib.sha256(case.encode()).digest()[:8], "big"))


def _number(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


@dataclass(frozen=True)
class _Seed:
    """A seed episode's constraint: its kind, rule text, the step it holds from, the two options it decides between
    (closed / open dock or shelf; for handling the helper and the dock), and the object it concerns."""

    kind: str
    text: str
    from_step: int
    options: tuple[str, str]
    subject: str


class _Shift:
    """The ids and the random draws of one case (Stage 1's state)."""

    def __init__(self, case: str, count_tokens: CountTokens) -> None:
        self.split, self.kind, self.index = parse_case_id(case)
        self.rng = case_rng(case)
        self.count_tokens = count_tokens
        rng = self.rng
        self.agents = [f"agent_{i}" for i in range(rng.randint(*AGENT_COUNT))]
        self.shelves = [f"shelf_{i}" for i in range(1, SHELF_COUNT + 1)]
        self.docks = [f"dock_{i}" for i in range(1, DOCK_COUNT + 1)]
        numbers = rng.sample(range(1, 10), 9)
        kinds = rng.sample(OBJECT_KINDS, len(OBJECT_KINDS))
        self.objects = [f"{k}_{n}" for k, n in zip(kinds, numbers, strict=False)]
        # the handled box, the relocated object, the box the dock query delivers
        self.cargo = dict(zip(CONSTRAINT_KINDS, rng.sample(self.objects, 3), strict=True))
        self.agent_id, self.helper = rng.sample(self.agents, 2)
        self.alpha = rng.uniform(*ALPHA_RANGE)

    def parity(self, kind: str) -> bool:
        """The queried kind alternates with the case index; the other seeds draw."""
        return self.index % 2 == 0 if kind == self.kind else self.rng.random() < 0.5

    def place(self) -> str:
        """A shelf, dock or park for an irrelevant event."""
        roll = self.rng.random()
        if roll < 0.6:
            return self.rng.choice(self.shelves)
        if roll < 0.9:
            return self.rng.choice(self.docks)
        return f"park_{self.rng.randrange(len(self.agents))}"

    def tokens(self, entry: Entry) -> int:
        """TOKENS of one entry: its prompt line with the newline."""
        return self.count_tokens(entry.line() + "\n")


# ---------------------------------------------------------------------------------------------- seed constraints

def _dock_rule(docks: tuple[str, str], closed_first: bool, from_step: int, variant: int) -> tuple[str, str, str]:
    closed, open_ = docks if closed_first else docks[::-1]
    text = (f"{closed} closes at step {from_step}: from step {from_step} on, deliver every box to {open_}. The "
            f"loading bay of {closed} is resurfaced and its door stays shut.") if variant == 0 else (
            f"From step {from_step} on, {closed} takes no deliveries: bring every box to {open_} instead. The "
            f"conveyor at {closed} is being replaced.")
    return closed, open_, text


def _handling_rule(box: str, helper: str, fragile: bool) -> str:
    if fragile:
        return (f"{box} is fragile: never place it yourself; hand it to {helper}, who sets fragile boxes down at "
                "the docks.")
    return (f"{box} carries a custody seal: whoever carries it places it at the dock; never hand it to another "
            "agent.")


def _relocation_rule(obj: str, shelves: tuple[str, str], closed_first: bool, from_step: int,
                     variant: int) -> tuple[str, str, str]:
    closed, open_ = shelves if closed_first else shelves[::-1]
    text = (f"{closed} is under maintenance from step {from_step}: fetch {obj} from {open_} instead."
            if variant == 0 else f"{obj} was moved from {closed} to {open_} at step {from_step}: fetch it from "
            f"{open_}.")
    return closed, open_, text


TEAMS = {"dock_closing": "loading", "handling": "packing", "relocation": "stock"}
"""The team a seed episode's briefing is for (no id: the briefing tells nothing without its constraint)."""


def _seed_episode(shift: _Shift, seed: _Seed, step: int) -> list[Entry]:
    """A briefing: the supervisor opens it, gives the constraint, an agent acknowledges, the briefing closes."""
    team = TEAMS[seed.kind]
    witness = shift.rng.choice([a for a in shift.agents if a != shift.agent_id])
    return [Entry(SUPERVISOR, step, Block.HISTORY, f"shift briefing for the {team} team at step {step}",
                  EntryKind.OBSERVATION.value),
            Entry(SUPERVISOR, step + 1, Block.HISTORY, seed.text, EntryKind.CONSTRAINT.value),
            Entry(witness, step + 2, Block.HISTORY, f"{witness} -> {SUPERVISOR}: noted", EntryKind.MESSAGE.value),
            Entry(SUPERVISOR, step + 3, Block.HISTORY, f"briefing for the {team} team done",
                  EntryKind.TASK_DONE.value)]


# ---------------------------------------------------------------------------------------------- irrelevant events

def _details(shift: _Shift, topic: str, where: str) -> Callable[[], str]:
    """A template's detail sentences, one per call: each of its pool once, in a drawn order, before any repeats."""
    rng = shift.rng
    obj, row = (lambda: rng.choice(shift.objects)), (lambda: rng.randint(1, 9))
    pools = {
        "shelf audit": [lambda: f"row {row()} is tidy", lambda: f"{obj()} barcode rescanned",
                        lambda: f"light level at {where} {rng.randint(180, 640)} lux",
                        lambda: f"no spill under {where}", lambda: f"bin {row()} refilled with {row()} liners",
                        lambda: f"the ladder at {where} is back on its hook",
                        lambda: f"{obj()} facing corrected on row {row()}", lambda: "the kick plate is loose",
                        lambda: f"{row()} price tags replaced", lambda: "the safety netting is intact",
                        lambda: f"top row load {rng.randint(40, 95)}% of the limit"],
        "inventory count": [lambda: f"{obj()} x{row()} in overflow", lambda: f"{row()} empty totes stacked",
                            lambda: "the count matches the ledger",
                            lambda: f"ledger off by {row()} for {obj()}, recount booked",
                            lambda: f"cycle count {row()} of the week", lambda: f"{obj()} x{row()} on the top row",
                            lambda: f"{row()} damaged cartons set aside", lambda: "the scanner synced at the end",
                            lambda: f"{obj()} reorder point reached", lambda: f"count took {rng.randint(3, 25)} min"],
        "battery log": [lambda: f"cell temperature {rng.randint(24, 41)} C",
                        lambda: f"charge cycles {rng.randint(80, 900)}",
                        lambda: f"charger voltage {rng.randint(46, 52)} V", lambda: "motor current nominal",
                        lambda: "wheel odometry reset", lambda: f"fan speed {rng.randint(20, 90)}%",
                        lambda: f"state of health {rng.randint(78, 99)}%", lambda: "the contacts were cleaned",
                        lambda: f"estimated range {rng.randint(2, 9)} hours", lambda: "firmware up to date"],
        "display note": [lambda: f"brightness {rng.randint(30, 100)}%", lambda: f"the display at {where} was wiped",
                         lambda: f"message {row()} of {row() + 9} in rotation",
                         lambda: f"the note stays up for {rng.randint(2, 9)} hours",
                         lambda: "the font was enlarged for the night shift", lambda: "the clock was set",
                         lambda: f"{row()} pixels dead in the corner", lambda: "the mount is firm",
                         lambda: "the next note is the lunch menu"],
        "aisle sweep": [lambda: f"{row()} bags filled", lambda: f"a loose strap removed near {where}",
                        lambda: "the drain grate is clear", lambda: f"sweeper brush wear {rng.randint(5, 60)}%",
                        lambda: f"{row()} pallets nudged back behind the line", lambda: "floor markings still visible",
                        lambda: f"{row()} shrink wrap scraps collected", lambda: "the dust filter was emptied",
                        lambda: f"sweep took {rng.randint(4, 30)} min"],
        "sensor reading": [lambda: f"humidity {rng.randint(30, 70)}%", lambda: f"CO2 {rng.randint(400, 900)} ppm",
                           lambda: f"noise level {rng.randint(48, 80)} dB", lambda: "the sensor battery is fine",
                           lambda: f"the reading was logged to channel {row()}",
                           lambda: f"dew point {rng.randint(2, 15)} C", lambda: "no smoke detected",
                           lambda: f"air flow {rng.randint(1, 6)} m/s at the vent", lambda: "calibration due next month"],
        "pallet check": [lambda: f"{row()} pallets rewrapped", lambda: f"{row()} corner boards replaced",
                         lambda: f"the scale at {where} reads {rng.randint(8, 40)} kg tare",
                         lambda: "no broken slats", lambda: f"{row()} labels printed",
                         lambda: f"stack height {rng.randint(90, 180)} cm", lambda: "the pallet jack was parked",
                         lambda: f"{row()} pallets sent back to the pool", lambda: "the wrap roll was changed"],
    }
    pool = pools[topic]
    queue: list[Callable[[], str]] = []

    def next_detail() -> str:
        if not queue:
            queue.extend(rng.sample(pool, len(pool)))
        return queue.pop()()

    return next_detail


def _head(shift: _Shift, topic: str, actor: str, where: str) -> str:
    """A template's first sentence."""
    rng = shift.rng
    robot = actor if actor != SUPERVISOR else rng.choice(shift.agents)
    notes = ("mind the wet floor", "safety talk at the break", "forklift drivers check horns",
             "report damaged pallets", "hydrate during the shift", "aisle lights are being tested")
    return {
        "shelf audit": lambda: f"audit of {where}: {rng.randint(6, 30)} totes counted, {rng.randint(0, 4)} labels "
                               "faded",
        "inventory count": lambda: f"inventory count at {where}: {rng.choice(shift.objects)} x{rng.randint(1, 9)}, "
                                   f"{rng.choice(shift.objects)} x{rng.randint(1, 9)}",
        "battery log": lambda: f"{robot} battery at {rng.randint(20, 98)}%, charging at park_{_number(robot)} for "
                               f"{rng.randint(5, 40)} min",
        "display note": lambda: f"display at {where} shows: '{rng.choice(notes)}'",
        "aisle sweep": lambda: f"sweep of the aisle next to {where} done",
        "sensor reading": lambda: f"temperature at {where} {rng.randint(12, 29)} C",
        "pallet check": lambda: f"pallet check at {where}: {rng.randint(2, 12)} pallets wrapped",
    }[topic]()


TOPICS = ("shelf audit", "inventory count", "battery log", "display note", "aisle sweep", "sensor reading",
          "pallet check")
"""The fixed templates of irrelevant events (App. E: shelf, audit, inventory, display notes)."""


def _conflict_head(shift: _Shift, seeds: Sequence[_Seed], step: int) -> tuple[str, str]:
    """(topic, first sentence) of an event that names a seed's ids without contradicting it; each option is named
    as often as the other."""
    rng = shift.rng
    seed = rng.choice(list(seeds))
    if seed.kind == "handling":
        box, (helper, dock) = seed.subject, seed.options
        other = rng.choice([o for o in shift.objects if o != box])
        return rng.choice([("shelf audit", f"{box} label reprinted at {rng.choice(shift.shelves)}"),
                           ("pallet check", f"{box} weight checked at {dock}: {rng.randint(2, 19)} kg"),
                           ("pallet check", f"{helper} placed {other} at {dock}")])
    option = rng.choice(seed.options)
    if seed.kind == "dock_closing":
        if step < seed.from_step:
            return "pallet check", f"{option} received {rng.randint(2, 9)} pallets at step {step}"
        return rng.choice([("pallet check", f"pallet check at {option}: {rng.randint(2, 12)} pallets wrapped"),
                           ("display note", f"display at {option} shows: 'report damaged pallets'")])
    if step < seed.from_step:
        return "inventory count", f"inventory count at {option}: {seed.subject} x{rng.randint(1, 4)}"
    return "shelf audit", f"audit of {option}: {rng.randint(6, 30)} totes counted"


def _event(shift: _Shift, step: int, length: float, seeds: Sequence[_Seed]) -> list[Entry]:
    """One irrelevant event of about `length` tokens: an actor's report (with an action outcome sometimes), closed
    by its task_done."""
    rng = shift.rng
    actor = SUPERVISOR if rng.random() < 1.0 / (len(shift.agents) + 1) else rng.choice(shift.agents)
    where = shift.place()
    if rng.random() < CONFLICT_SHARE:
        topic, head = _conflict_head(shift, seeds, step)
    else:
        topic = rng.choice(TOPICS)
        head = _head(shift, topic, actor, where)
    detail = _details(shift, topic, where)
    entries = []
    if actor != SUPERVISOR and rng.random() < 0.5:
        entries.append(Entry(actor, step, Block.HISTORY, f"move_to(target={where}) succeeded: reached {where}",
                             EntryKind.ACTION_OUTCOME.value))
    done = Entry(actor, step + len(entries) + 1, Block.HISTORY, f"{topic} done", EntryKind.TASK_DONE.value)
    fixed = sum(shift.tokens(e) for e in entries) + shift.tokens(done)
    details: list[str] = []
    report = Entry(actor, step + len(entries), Block.HISTORY, f"{head}.", EntryKind.OBSERVATION.value)
    while fixed + shift.tokens(report) < length:
        details.append(detail())
        report = replace(report, text=f"{head}. {'; '.join(details)}.")
    return [*entries, report, done]


# ---------------------------------------------------------------------------------------------- the query

def _query(shift: _Shift, seed: _Seed, step: int) -> tuple[list[Entry], ActionSchema, Step, Step]:
    """The agent's task and state at `step`, the two-call schema, the compliant and the violating call."""
    rng, agent = shift.rng, shift.agent_id
    park = f"park_{_number(agent)}"
    if seed.kind == "handling":
        box, (helper, dock) = seed.subject, seed.options
        task = f"{agent} must bring {box} to {dock}; {helper} works at {dock}."
        state = f"at {dock}, holding {box}, {helper} next to it, next no plan"
        place = Step("place", {"object": box, "target": dock})
        handoff = Step("handoff", {"object": box, "to_agent": helper})
        compliant, violating = (handoff, place) if "fragile" in seed.text else (place, handoff)
        actions = {"place": {"object": {"choices": [box]}, "target": {"choices": [dock]}},
                   "handoff": {"object": {"choices": [box]}, "to_agent": {"choices": [helper]}}}
        order = rng.sample(list(actions), 2)
        schema = ActionSchema.from_dict({"max_steps": 1, "actions": {a: actions[a] for a in order}})
    else:
        closed, open_ = seed.options
        options = rng.sample([closed, open_], 2)
        if seed.kind == "dock_closing":
            box = seed.subject
            task = f"{agent} must deliver {box} to an outbound dock: {options[0]} or {options[1]}."
            state = f"at {park}, holding {box}, next no plan"
        else:
            obj, dock = seed.subject, rng.choice([d for d in shift.docks if d not in seed.text])
            task = (f"{agent} must fetch {obj} and bring it to {dock}; {obj} is stocked on {options[0]} and "
                    f"{options[1]}.")
            state = f"at {park}, empty-handed, next no plan"
        compliant, violating = Step("move_to", {"target": open_}), Step("move_to", {"target": closed})
        schema = ActionSchema.from_dict({"max_steps": 1, "actions": {"move_to": {"target": {
            "choices": rng.sample([closed, open_], 2)}}}})
    entries = [Entry(agent, step, Block.TASK, task, EntryKind.TASK.value),
               Entry(agent, step, Block.STATE, state, EntryKind.OBSERVATION.value)]
    return entries, schema, compliant, violating


def _seeds(shift: _Shift, first_step: int) -> list[_Seed]:
    """One seed constraint per kind, on disjoint ids; the steps they hold from lie shortly after their briefing."""
    rng = shift.rng
    docks = rng.sample(shift.docks, 3)
    shelves = rng.sample(shift.shelves, 2)
    order = rng.sample(CONSTRAINT_KINDS, len(CONSTRAINT_KINDS))
    seeds = []
    for n, kind in enumerate(order):
        step = first_step + n * GAP_STEPS
        from_step = step + rng.randint(8, 40)
        subject = shift.cargo[kind]
        if kind == "dock_closing":
            pair = (docks[0], docks[1]) if _number(docks[0]) < _number(docks[1]) else (docks[1], docks[0])
            closed, open_, text = _dock_rule(pair, shift.parity(kind), from_step, rng.randrange(2))
            seeds.append(_Seed(kind, text, from_step, (closed, open_), subject))
        elif kind == "handling":
            text = _handling_rule(subject, shift.helper, shift.parity(kind))
            seeds.append(_Seed(kind, text, step + 1, (shift.helper, docks[2]), subject))
        else:
            pair = (shelves[0], shelves[1]) if _number(shelves[0]) < _number(shelves[1]) else (shelves[1], shelves[0])
            closed, open_, text = _relocation_rule(subject, pair, shift.parity(kind), from_step, rng.randrange(2))
            seeds.append(_Seed(kind, text, from_step, (closed, open_), subject))
    return seeds


def opening_entries(agents: Sequence[str]) -> list[Entry]:
    """The warehouse's framing at step 0 (warehouse_feed.episode_entries): the episode's TASK and the standing
    CONSTRAINTS entry."""
    return [Entry(SUPERVISOR, 0, Block.TASK,
                  f"Warehouse shift, {len(agents)} agents. Places: shelf_1 to shelf_{SHELF_COUNT}, dock_1 to "
                  f"dock_{DOCK_COUNT}, park_<i> for agent_<i>.", EntryKind.TASK.value),
            Entry(SUPERVISOR, 0, Block.CONSTRAINTS, "One agent per cell. Objects may be moved: the latest notice "
                  "says where. Idle agents go to their park.", EntryKind.CONSTRAINT.value)]


def make_case(case: str, budget_tokens: int, count_tokens: CountTokens,
              base_length_tokens: int = BASE_LENGTH_TOKENS) -> HaystackCase:
    """Alg. 1, Stage 1: the case `case` with a history of at least `budget_tokens` tokens (`count_tokens`: the
    planner's tokenizer on one entry's prompt line)."""
    if not 0 < budget_tokens <= MAX_BUDGET_TOKENS:
        raise ValueError(f"budget_tokens {budget_tokens} is outside 1..{MAX_BUDGET_TOKENS}")
    if base_length_tokens < 8:
        raise ValueError(f"base_length_tokens {base_length_tokens} is below 8")
    shift = _Shift(case, count_tokens)
    rng = shift.rng
    seeds = _seeds(shift, 1)
    history: list[Entry] = []
    constraint: Optional[Entry] = None
    for n, seed in enumerate(seeds):
        episode = _seed_episode(shift, seed, 1 + n * GAP_STEPS)
        history += episode
        if seed.kind == shift.kind:
            constraint = episode[1]
    tokens = sum(shift.tokens(e) for e in history)
    t = history[-1].step + GAP_STEPS  # Alg. 1 line 1: the irrelevant events follow the last seed
    while tokens < budget_tokens:
        length = rng.uniform(*LENGTH_RANGE) * shift.alpha * base_length_tokens
        event = _event(shift, t, length, seeds)
        history += event
        tokens += sum(shift.tokens(e) for e in event)
        t += GAP_STEPS
    history.sort(key=lambda e: e.step)  # Alg. 1 line 7 (already in time order: a stable no-op)
    t = max(t, max(s.from_step for s in seeds) + GAP_STEPS)  # the query comes after every constraint holds
    seed = next(s for s in seeds if s.kind == shift.kind)
    query, schema, compliant, violating = _query(shift, seed, t)
    assert constraint is not None
    return HaystackCase(case, shift.kind, budget_tokens, shift.agent_id, tuple(opening_entries(shift.agents)),
                        tuple(history), constraint, tuple(query), schema, compliant, violating, tokens,
                        round(shift.alpha, 4))


def make_cases(split: str, count: int, budgets: Sequence[int], count_tokens: CountTokens,
               kinds: Sequence[str] = CONSTRAINT_KINDS, first: int = 0) -> list[HaystackCase]:
    """`count` cases per kind of `split`; case i's history budget is budgets[i % len(budgets)]."""
    if not budgets:
        raise ValueError("budgets is empty")
    return [make_case(c, budgets[parse_case_id(c)[2] % len(budgets)], count_tokens)
            for c in case_ids(split, count, kinds, first)]


def turn_summary(text: str, max_words: int = 20) -> str:
    """Table 1's turn summary of one history entry, on its own: its first sentence, at most `max_words` words (an
    extractive template: deterministic, no model)."""
    text = " ".join(text.split())
    match = re.search(r"(?<=[.!?])\s", text)
    first = text[:match.start()] if match else text
    kept = first.split()
    return " ".join(kept[:max_words]) + (" ..." if len(kept) > max_words else "")
