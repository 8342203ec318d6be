"""The memory modules a planner composes on its call path (DESIGN 3b): what they ingest and what a call retrieves.

`MemorySystem` composes any subset of `MODULES` (a `MemorySystemConfig`), feeds them what the graph publishes and
fills a call's memory reserve in `RETRIEVAL_ORDER`; an optional summariser rewrites episodic records on a worker.
The modules and their order: docs/memory.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.action_schema import Step, Subtask
from brace_common.counters import Counters, Health
from brace_common.scene_graph import SceneGraph, agent_goal
from brace_common.session_graph import Embedder, SessionGraphs, doing_step
from brace_common.vocabulary import Block, Failure, Mode
from brace_common.world_state import WorldState

from .context_tree import ContextTree
from .episodic import EpisodicMemory, record_line
from .experience import TAU, ExperienceBank, Match, Trajectory
from .lookahead import Predict, candidates, lookahead_lines
from .rag import ranked_by_relevance
from .recap import MAX_DEPTH, RecapFrames, Transition
from .record_index import RecordIndex
from .records import RecordKind
from .reflective import PREEMPTION, Prior, ReflectiveMemory, failure_kind
from .store import MemoryStore, StoreError
from .summary import CLOSE_TIMEOUT_S, SUMMARY_QUEUE, Summariser, SummaryRequest, SummaryWorker

MODULES = ("episodic", "reflective", "rag_static", "rag_memory", "state_graph", "experience", "lookahead")
"""Memory modules a planner may compose (parameter `memory_modules`)."""
GIG_MODULES = ("state_graph", "experience", "lookahead")
"""The modules that read the world's states (GiG)."""
RETRIEVAL_ORDER = ("state_graph", "experience", "lookahead", "reflective", "episodic", "rag_static", "rag_memory")
"""The order in which retrieving modules fill a call's memory cap."""


@dataclass
class Retrieved:
    """What the retrieve phase adds to a call: its lines, their tokens, lines per module, and lines left out."""

    lines: list[str] = field(default_factory=list)
    tokens: int = 0
    by_module: dict[str, int] = field(default_factory=dict)
    left_out: int = 0


@dataclass(frozen=True)
class StepOutcome:
    """A step an agent executed (an ExecutionOutcome), as memory reads it."""

    agent_id: str
    step: int
    action: str
    success: bool
    detail: str = ""
    failure: int = 0  # Failure's value; PREEMPTED: the visual verifier stopped the step
    stamp: float = 0.0


def check_modules(modules: Sequence[str]) -> tuple[str, ...]:
    """`modules` when each is one of MODULES and none repeats; ValueError naming the first that is not."""
    for name in modules:
        if name not in MODULES:
            raise ValueError(f"'{name}' is not a memory module ({', '.join(MODULES)})")
    if len(set(modules)) != len(modules):
        raise ValueError("a memory module is named twice")
    return tuple(modules)


@dataclass(frozen=True)
class MemorySystemConfig:
    """What a MemorySystem composes and its bounds (a planner builds it from PlannerConfig, factory.memory_config).

    `modules`: a subset of MODULES (ValueError naming the first that is not); `tree_depth`: the context tree's goal
    levels; `max_lines`: lines a call retrieves at most; `summary_queue`: the summary worker's queue; `scene_hops`
    and `scene_cell_m` cut an agent's scene graph from a world state (brace_common.scene_graph.agent_view); `tau`:
    the experience bank's embedding match; `lookahead_candidates`: the steps a call projects at most; `recursion`:
    the planner decomposes (ReCAP Alg. 1) and each agent's frame stack (recap.py), at most `recap_max_depth` frames,
    drives its calls and its goal stack.
    """

    modules: tuple[str, ...] = ()
    tree_depth: int = 3
    max_lines: int = 8
    summary_queue: int = SUMMARY_QUEUE
    scene_hops: int = 2
    scene_cell_m: float = 1.0
    tau: float = TAU
    lookahead_candidates: int = 3
    recursion: bool = False
    recap_max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        object.__setattr__(self, "modules", check_modules(self.modules))
        if self.recap_max_depth < 1:
            raise ValueError(f"recap_max_depth {self.recap_max_depth} must be at least 1")


class MemorySystem:
    """The composed modules of one planner, fed by what the graph publishes, read by each call (thread-safe).

    `config` names the modules and their bounds; `store` (None: held in the process) keeps the records; `corpus`
    (rag_static) and `priors` (reflective) are the loaded passages. `summariser` (None: templates only) summarises
    each episodic record on a background worker; `log` hears why a summary was not applied. `embed` (None: keys
    only) embeds scene graphs for the experience bank. `predict` (set by whoever holds the world's transition model)
    projects lookahead's steps.
    """

    def __init__(self, config: MemorySystemConfig, store: Optional[MemoryStore] = None, *,
                 corpus: Sequence[Prior] = (), priors: Sequence[Prior] = (), summariser: Optional[Summariser] = None,
                 log: Optional[Callable[[str], None]] = None, embed: Optional[Embedder] = None) -> None:
        self.config = config
        self.modules = config.modules
        self.store = RecordIndex(store if store is not None else MemoryStore(None))
        self.tree = ContextTree(config.tree_depth)
        self.recursion = config.recursion
        self.frames = RecapFrames(self.store, config.recap_max_depth)
        self.episodic = EpisodicMemory(self.store)
        self.reflective = ReflectiveMemory(self.store, tuple(priors))
        self.corpus = tuple(corpus)
        # Records are written only for a module that reads them (rag_memory reads both kinds).
        self.folding = self.on("episodic") or self.on("rag_memory")
        self.reflecting = self.on("reflective") or self.on("rag_memory")
        self.lock = threading.Lock()
        self.graphs = SessionGraphs(config.scene_hops, config.scene_cell_m)
        self.embed = embed
        self.bank = ExperienceBank(self.store, config.tau)
        self.goals: dict[str, str] = {}
        self.predict: Optional[Predict] = None
        self.calls: list[Step] = []      # the valid skill calls of the current schema (lookahead's candidates)
        self.views: dict[str, dict[str, SceneGraph]] = {}   # per agent: each state's scene graph this episode
        self.closed: Optional[tuple] = None   # the last closed episode's (world, episode), graphs, views, goals
        self.counts = Counters(("retrievals", "lines_retrieved", "lines_left_out", "notes_dropped", "loop_warnings",
                                "experiences_kept", "experiences_matched", "lookahead_projected",
                                "lookahead_unanswered"))
        self._closed = False
        self.summaries: Optional[SummaryWorker] = None
        if summariser is not None and self.folding:
            worker = SummaryWorker(summariser, self._apply_summary, config.summary_queue, log)
            self.summaries = worker
            self.episodic.on_fold = lambda record, segment: worker.submit(SummaryRequest(record, segment))

    def _apply_summary(self, request: SummaryRequest, fields: dict[str, Any]) -> bool:
        """A valid summary replaces its record's fields while the record still holds the template (False: late)."""
        record = request.record
        with self.lock:
            if self._closed:
                return False
            try:
                return self.store.replace_fields(record.agent_id, RecordKind.EPISODIC, record.key, fields,
                                                 expected=record.fields)
            except StoreError:
                return False  # the store closed under us: the summary came too late

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop the summary worker (within `timeout_s`; pending summaries are dropped), then close the store."""
        if self.summaries is not None:
            self.summaries.close(timeout_s)
        with self.lock:
            self._closed = True
            self.store.close()

    def health(self, prefix: str = "memory.") -> Health:
        """What a planner reports of its memory (each name after `prefix`): these counts, the context tree's
        (`tree.`), the store's (`store.`) and the summary worker's (`summaries.`, with one)."""
        health = self.counts.health(prefix) + self.tree.health(prefix + "tree.") + self.store.health(prefix + "store.")
        if self.recursion:
            health = health + self.frames.health(prefix + "recap.")
        return health + self.summaries.health(prefix + "summaries.") if self.summaries is not None else health

    def on(self, module: str) -> bool:
        """Whether `module` is composed."""
        return module in self.modules

    def retrieving(self) -> bool:
        """Whether any module adds lines at the retrieve phase."""
        return any(self.on(m) for m in RETRIEVAL_ORDER)

    # ------------------------------------------------------------------ what the graph publishes

    def on_entry(self, agent_id: str, step: int, kind: str, text: str, teammates: frozenset[str] = frozenset(),
                 stamp: float = 0.0, block: Optional[Block] = None) -> None:
        """A context entry of `agent_id` (its kind as ContextEntry.KIND_*, its block); a constraint also consolidates
        into a reflective constraint record (when a module reads them) and, stated during the run (not a standing
        rule of the CONSTRAINTS block, which every prompt shows), joins the agent's task in its goal stack. A STATE
        entry is not folded into an episodic record: the prompt always holds the agent's latest state, and an
        earlier one in a record contradicts it."""
        with self.lock:
            if kind == "constraint" and self.reflecting:
                self.reflective.on_constraint(agent_id, step, text, stamp)
            if kind == "task":
                self.tree.on_task(agent_id, text)
                if self.recursion:
                    self.frames.on_task(agent_id, text, step)
            elif kind == "constraint" and block != Block.CONSTRAINTS:
                self.tree.on_constraint(agent_id, text)
            elif kind == "task_done":
                self.tree.on_task_done(agent_id)
            if self.folding and block != Block.STATE:  # a snapshot of an earlier state misleads next to the latest
                self.episodic.on_entry(agent_id, step, kind, text, teammates, stamp)

    def on_context_entry(self, entry, teammates: frozenset[str] = frozenset()) -> None:
        """`on_entry` for a context entry as the planner's buffer or a world's feed holds it (agent_id, step, kind,
        text, block, and its stamp when it has one)."""
        self.on_entry(entry.agent_id, entry.step, entry.kind, entry.text, teammates, getattr(entry, "stamp", 0.0),
                      entry.block)

    def on_outcome(self, outcome: StepOutcome) -> None:
        """A step the agent executed: the tree advances; a failure writes a reflection; a step the visual verifier
        preempted (Failure.PREEMPTED) is `on_preemption`."""
        if outcome.failure == Failure.PREEMPTED:
            self.on_preemption(outcome)
            return
        with self.lock:
            if not outcome.success and self.reflecting:
                current = self.tree.current_step(outcome.agent_id, outcome.action)
                self.reflective.on_failure(outcome.agent_id, outcome.step, outcome.action,
                                           current.parameters if current else None, failure_kind(outcome.failure),
                                           outcome.detail, stamp=outcome.stamp)
            self.tree.on_outcome(outcome.agent_id, outcome.action, outcome.success, outcome.detail)
            if self.recursion:
                self.frames.on_outcome(outcome.agent_id, outcome.step, outcome.action, outcome.success, outcome.detail)

    def on_plan(self, agent_id: str, step: int, mode: Mode, steps: list[Step], rationale: str = "",
                stamp: float = 0.0) -> None:
        """A plan this planner returned: the tree decomposes / refines / repairs; a new plan (full or partial replan)
        closes the episode segment, a refinement of the remaining steps (reuse) continues it."""
        with self.lock:
            self.tree.on_plan(agent_id, step, mode, steps, rationale)
            if self.folding and Mode(mode) != Mode.REUSE_SUBPLAN:
                self.episodic.boundary(agent_id, step, "plan change", stamp)

    def on_note(self, agent_id: str, step: int, text: str, stamp: float = 0.0) -> bool:
        """A plan's memory write (memory_write.py): reflective memory keeps `text` as the agent's note; False
        (counted under notes_dropped) when no composed module reads notes."""
        with self.lock:
            if not self.reflecting:
                self.counts["notes_dropped"] += 1
                return False
            self.reflective.note(agent_id, step, text, stamp=stamp)
            return True

    def on_preemption(self, outcome: StepOutcome) -> None:
        """The verifier preempted the agent's step: a reflection and an episodic boundary."""
        agent_id, step, action, detail = outcome.agent_id, outcome.step, outcome.action, outcome.detail
        with self.lock:
            current = self.tree.current_step(agent_id, action)
            if self.reflecting:
                self.reflective.on_failure(agent_id, step, action, current.parameters if current else None,
                                           PREEMPTION, detail, stamp=outcome.stamp)
            self.tree.on_outcome(agent_id, action, False, f"preempted: {detail}")
            if self.recursion:
                self.frames.on_outcome(agent_id, step, action, False, f"preempted: {detail}")
            if self.folding:
                self.episodic.boundary(agent_id, step, "preemption", outcome.stamp)

    def start_episode(self) -> None:
        """An episode starts: goal stacks, open segments and session graphs are dropped; stored records stay."""
        with self.lock:
            self.tree.forget()
            if self.recursion:
                self.frames.forget()
            self.episodic.start_episode()
            self._close_session()

    def on_schema(self, calls: list[Step]) -> None:
        """The valid skill calls of the schema the next calls plan with (lookahead's candidates)."""
        with self.lock:
            self.calls = list(calls)

    def reads_world_states(self) -> bool:
        """Whether a composed module reads the world's states (GiG's)."""
        return any(self.on(m) for m in GIG_MODULES)

    def on_world_state(self, state: WorldState) -> None:
        """A world's state: every agent's scene graph joins its session graph (GiG Alg. 1 line 16)."""
        if not self.reads_world_states():
            return
        with self.lock:
            if self.graphs.episode not in (None, (state.world, state.episode)):
                self._close_session()  # a state of the next episode may come before the end of this one
            self.graphs.observe(state)
            keep_views = self.embed is not None and self.on("experience")  # end_episode embeds the kept views
            for agent, view in self.graphs.latest.items():
                if keep_views:
                    self.views.setdefault(agent, {})[view.key()] = view
                self.goals[agent] = agent_goal(state, agent) or self.goals.get(agent, "")

    def _close_session(self) -> None:
        """The session graphs of the episode under way become the last closed one (its end may come later)."""
        if self.graphs.episode is not None:
            self.closed = (self.graphs.episode, self.graphs.graphs, self.views, self.goals)
        self.graphs.reset()
        self.views, self.goals = {}, {}

    def end_episode(self, episode_id: str, success: bool, step: int = 0, stamp: float = 0.0,
                    episode: Optional[tuple[str, int]] = None) -> int:
        """An episode ended: when it succeeded, each agent's session graph joins the experience bank (Alg. 1 line
        18, with embeddings when an encoder is given); the experiences kept. `episode` (world, episode) names the
        session: the one under way, or the last closed one when states of the next episode came first (None: the
        one under way)."""
        if not (success and self.on("experience")):
            return 0
        kept = 0
        with self.lock:
            if episode is None or self.graphs.episode == episode:
                graphs, views, goals = self.graphs.graphs, self.views, self.goals
            elif self.closed is not None and self.closed[0] == episode:
                _, graphs, views, goals = self.closed
            else:
                return 0
            for agent, graph in graphs.items():
                path = graph.trajectory()
                zs = self.embed([views[agent][v.key] for v in path]) if self.embed is not None and path else ()
                trajectory = Trajectory(agent, episode_id, goals.get(agent, ""), path, zs)
                if self.bank.add(trajectory, step, stamp) is not None:
                    kept += 1
            self.counts["experiences_kept"] += kept
        return kept

    # ------------------------------------------------------------------ what a call reads

    def goal_stack(self, agent_id: str) -> list[str]:
        """The agent's ReCAP goal stack (lines; empty when it has neither task nor plan): with `recursion`, what its
        frame stack re-injects (recap.RecapFrames.prompt_lines), else the context tree's."""
        with self.lock:
            return self.frames.prompt_lines(agent_id) if self.recursion else self.tree.goal_stack(agent_id)

    # ------------------------------------------------------------------ ReCAP's recursion (config.recursion)

    def recap_need(self, agent_id: str) -> Transition:
        """What the agent's top frame waits for (π, ρ, the executor; nothing without a frame), its depth and goal."""
        with self.lock:
            return self.frames.need(agent_id)

    def recap_open(self, agent_id: str, step: int = 0, task: str = "") -> Transition:
        """`recap_need` for a call: an agent without an open frame gets its root again first (`task`: its goal when
        no task entry named one)."""
        with self.lock:
            return self.frames.reopen(agent_id, step, task)

    def recap_plan(self, agent_id: str, step: int, thought: str, subtasks: list[Subtask]) -> tuple[list[Step],
                                                                                                  Transition]:
        """A call's (T, S) for the agent's top frame (π or ρ): the primitives the executor may run now, and what the
        stack needs next. ValueError for a composite at the deepest frame or an agent without a frame."""
        with self.lock:
            state = self.frames.on_plan(agent_id, step, thought, subtasks)
            return self.frames.executable(agent_id), state

    def recap_reuse(self, agent_id: str, step: int) -> tuple[list[Step], Transition]:
        """The controller reused the top frame's S instead of a ρ call: the primitives the executor may run now,
        and what the stack needs next."""
        with self.lock:
            state = self.frames.reuse(agent_id, step)
            return self.frames.executable(agent_id), state

    def recap_goal(self, agent_id: str) -> Optional[Step]:
        """The composite subtask the agent's top frame decomposes (None at the root, or without a frame)."""
        with self.lock:
            return self.frames.goal_step(agent_id)

    def recap_subtasks(self, agent_id: str) -> tuple[str, list[Subtask]]:
        """The top frame's (T, S) (empty without a frame)."""
        with self.lock:
            frames = self.frames.stack(agent_id)
            return (frames[-1].thought, list(frames[-1].subtasks)) if frames else ("", [])

    def window_since(self, agent_id: str) -> int:
        """The step the agent's top frame opened at (its sliding window starts there; -1: no frame)."""
        with self.lock:
            return self.frames.window_since(agent_id)

    def goal_constraints(self, agent_id: str) -> list[str]:
        """The constraints the agent's goal stack shows with its task (a `recap` layout's prompt holds them)."""
        with self.lock:
            return self.tree.constraints(agent_id)

    def folded_through(self, agent_id: str) -> int:
        """The last step of the agent's history folded into episodic records (-1: none, or `episodic` is off)."""
        with self.lock:
            return self.episodic.folded_through(agent_id) if self.on("episodic") else -1

    def query(self, agent_id: str, state: str = "") -> str:
        """What a call's retrieval looks for: the agent's task, the step it executes and its state."""
        with self.lock:
            tree = self.tree.trees.get(agent_id)
            now = self.tree.current_step(agent_id)
            return " ".join(filter(None, (tree.task if tree else "", now.text() if now else "", state)))

    def candidates(self, module: str, agent_id: str, query: str, now_step: int,
                   in_prompt: Collection[str] = ()) -> list[str]:
        """A retrieving module's lines for a call, best first (`in_prompt`: constraint texts the prompt holds)."""
        if module == "reflective":
            return self.reflective.ranked(agent_id, query, now_step, in_prompt)
        if module == "episodic":
            return [self.line(r) for r in reversed(self.episodic.episode_records(agent_id))]
        if module == "rag_static":
            return ranked_by_relevance(query, [p.text for p in self.corpus])
        if module == "state_graph":
            loop = self.graphs.loop_now(agent_id)
            return [loop.line()] if loop is not None else []
        if module == "lookahead":
            return []  # projected outside the lock, by retrieve: see lookahead()
        if module == "experience":
            match = self._match(agent_id)
            return [match.line()] if match is not None else []
        records = [r for r in self.store.records(agent_id) if r.kind not in (RecordKind.EXPERIENCE, RecordKind.FRAME)] \
            + [r for r in self.reflective.constraints() if r.agent_id != agent_id]
        return ranked_by_relevance(query, [self.line(r) for r in records])

    def _match(self, agent_id: str) -> Optional[Match]:
        """The experience matching the agent's current state (Eq. 6), or None."""
        view = self.graphs.latest.get(agent_id)
        if view is None:
            return None
        z = self.embed([view])[0] if self.embed is not None else ()
        return self.bank.search(view.key(), z)

    def lookahead(self, agent_id: str, query: str) -> list[str]:
        """P(s_t) for the agent's candidate steps (lookahead.py), projected through `predict` outside the lock (a
        world's answer takes a while); empty without `predict`, a state of the agent, or the module."""
        with self.lock:
            view = self.graphs.latest.get(agent_id)
            predict = self.predict
            if not self.on("lookahead") or predict is None or view is None:
                return []
            graph = self.graphs.graphs.get(agent_id)
            now = graph.current() if graph is not None else None
            first = [doing_step(now.action)] if now is not None else []
            match = self._match(agent_id) if self.on("experience") else None
            first += [doing_step(a) for a in match.actions] if match is not None else []
            steps = candidates(self.calls, query, [s for s in first if s is not None], self.config.lookahead_candidates)
        lines = lookahead_lines(predict, agent_id, steps, view, self.graphs.hops, self.graphs.cell_m)
        with self.lock:
            self.counts["lookahead_projected"] += len(lines)
            self.counts["lookahead_unanswered"] += len(steps) - len(lines)
        return lines

    @staticmethod
    def line(record) -> str:
        """A record as the line the planner reads."""
        if record.kind == RecordKind.EPISODIC:
            return record_line(record)
        return ReflectiveMemory.line(record)

    def retrieve(self, agent_id: str, query: str, now_step: int, cap_tokens: int,
                 count_tokens: Callable[[list[str]], list[int]], in_prompt: Collection[str] = ()) -> Retrieved:
        """At most `cap_tokens` tokens and `max_lines` lines of memory for a call (`count_tokens`: each line's
        tokens, newline included, with the planner's tokenizer; `in_prompt`: the constraint texts the call's prompt
        holds already, which reflective memory does not repeat)."""
        out = Retrieved()
        projected = self.lookahead(agent_id, query) if cap_tokens > 0 else []
        with self.lock:
            for module in RETRIEVAL_ORDER:
                if not self.on(module) or cap_tokens <= 0:
                    continue
                found = projected if module == "lookahead" else self.candidates(module, agent_id, query, now_step,
                                                                               in_prompt)
                lines = [line for line in found if line not in out.lines]
                if not lines:
                    continue
                lines = lines[:self.config.max_lines * 2]  # more than can fit is never counted
                chosen = []
                for line, tokens in zip(lines, count_tokens(lines), strict=True):
                    if len(out.lines) + len(chosen) >= self.config.max_lines or out.tokens + tokens > cap_tokens:
                        out.left_out += 1
                        continue
                    chosen.append(line)
                    out.tokens += tokens
                if module == "episodic":
                    chosen.reverse()  # chronological in the prompt
                out.lines.extend(chosen)
                out.by_module[module] = len(chosen)
                if chosen and module == "state_graph":
                    self.counts["loop_warnings"] += 1
                elif chosen and module == "experience":
                    self.counts["experiences_matched"] += 1
            self.counts["retrievals"] += 1
            self.counts["lines_retrieved"] += len(out.lines)
            self.counts["lines_left_out"] += out.left_out
        return out
