"""GiG on the retrieve phase: loop warnings from the session graph and the experience bank of successful episodes."""

from __future__ import annotations

import pytest

from brace_common.session_graph import Visit
from brace_common.vocabulary import Activity, Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState
from brace_memory.experience import ExperienceBank, Trajectory
from brace_memory.record_index import RecordIndex
from brace_memory.records import RecordKind
from brace_memory.store import MemoryStore
from brace_memory.system import MemorySystem, MemorySystemConfig


def chars(lines: list[str]) -> list[int]:
    return [len(line) for line in lines]


def state(step: int, x: int, episode: int = 0, holding: bool = False, action: str = "move_to") -> WorldState:
    """A one-robot warehouse-like world: agent_0 at cell (x, 0), its task to deliver box_1 to dock_0."""
    entities = [Entity("agent_0", "robot", pose=Pose.planar(x, 0)), Entity("box_1", "object",
                "held" if holding else "on_shelf"), Entity("dock_0", "dock"),
                Entity("task_0", "task", "open", attributes={"text": "deliver box_1 to dock_0"})]
    relations = [Relation("agent_0", Predicate.ASSIGNED, "task_0"), Relation("task_0", Predicate.CONCERNS, "box_1"),
                 Relation("task_0", Predicate.TARGET, "dock_0")]
    if holding:
        relations.append(Relation("agent_0", Predicate.HOLDING, "box_1"))
    return WorldState("warehouse", episode, step, tuple(entities), tuple(relations),
                      (AgentActivity("agent_0", Activity.EXECUTING, action, f'{{"x": {x + 1}}}'),))


def test_a_revisited_state_retrieves_a_loop_warning_first():
    system = MemorySystem(MemorySystemConfig(["state_graph", "reflective"]))
    for step, x in enumerate([0, 1, 0]):
        system.on_world_state(state(step, x))
    got = system.retrieve("agent_0", "", 2, 10_000, chars)
    assert got.lines[0].startswith("loop warning: agent_0 was in this state at step 0")
    assert got.by_module["state_graph"] == 1 and system.counts["loop_warnings"] == 1
    system.on_world_state(state(3, 5))
    assert "state_graph" not in system.retrieve("agent_0", "", 3, 10_000, chars).by_module


def run_episode(system: MemorySystem, episode: int, success: bool) -> None:
    system.start_episode()
    path = [(0, False, "move_to"), (1, False, "pick"), (1, True, "move_to"), (2, True, "place")]
    for step, (x, holding, action) in enumerate(path):
        system.on_world_state(state(step, x, episode, holding, action))
    system.end_episode(f"e{episode}", success, step=len(path))


def test_a_successful_episode_is_kept_and_a_later_one_retrieves_its_next_actions(tmp_path):
    path = tmp_path / "memory.sqlite"
    system = MemorySystem(MemorySystemConfig(["experience"]), MemoryStore(path))
    run_episode(system, 0, success=False)
    assert system.counts["experiences_kept"] == 0
    run_episode(system, 1, success=True)
    assert system.counts["experiences_kept"] == 1
    system.close()

    again = MemorySystem(MemorySystemConfig(["experience"]), MemoryStore(path))   # the bank survives the process
    again.on_world_state(state(0, 1, episode=2))                # the state before the pick
    got = again.retrieve("agent_0", "", 0, 10_000, chars)
    assert got.lines == ['past experience (goal: deliver box_1 to dock_0): from a state like this one, the next '
                         'actions were: pick(x=2); move_to(x=2); place(x=3)']
    assert again.counts["experiences_matched"] == 1
    again.on_world_state(state(1, 7, episode=2))                # nowhere the bank has been
    assert again.retrieve("agent_0", "", 1, 10_000, chars).lines == []
    assert again.retrieve("agent_0", "box_1", 1, 10_000, chars).lines == []  # rag modules off: nothing else
    again.close()


def test_rag_memory_does_not_read_experience_records():
    system = MemorySystem(MemorySystemConfig(["experience", "rag_memory"]))
    run_episode(system, 0, success=True)
    assert system.store.records("agent_0", RecordKind.EXPERIENCE)
    system.on_world_state(state(9, 9, episode=1))
    assert system.retrieve("agent_0", "deliver box_1", 9, 10_000, chars).lines == []


def visits(keys: str, actions: str = "") -> list[Visit]:
    return [Visit(k, step=i, last_step=i, action=(actions[i] if i < len(actions) else "")) for i, k in enumerate(keys)]


def test_embeddings_match_within_tau_and_the_nearest_wins():
    bank = ExperienceBank(RecordIndex(MemoryStore(None)), tau=0.1)
    bank.add(Trajectory("agent_0", "e0", "goal a", visits("ABC", "xy"), zs=[(0.0, 0.0), (1.0, 0.0), (2.0, 0.0)]))
    bank.add(Trajectory("agent_1", "e1", "goal b", visits("DE", "q"), zs=[(1.04, 0.0), (5.0, 5.0)]))
    assert len(bank) == 2
    match = bank.search("unseen", (1.03, 0.0))
    assert match is not None and match.goal == "goal b" and match.actions == ("q",)
    assert match.distance == pytest.approx(0.01, abs=1e-5)
    assert bank.search("unseen", (1.5, 0.0)) is None        # beyond tau
    assert bank.search("C") is None                          # a trajectory's last state: nothing was done from it
    assert bank.search("A").actions == ("x", "y")
    assert bank.add(Trajectory("agent_0", "e2", "too short", visits("A"))) is None


def test_bad_bank_arguments_are_refused():
    with pytest.raises(ValueError, match="tau"):
        ExperienceBank(RecordIndex(MemoryStore(None)), tau=float("nan"))
    bank = ExperienceBank(RecordIndex(MemoryStore(None)))
    with pytest.raises(ValueError, match="embeddings"):
        bank.add(Trajectory("agent_0", "e", "g", visits("AB", "x"), zs=[(0.0,)]))


def test_lookahead_projects_the_current_step_and_relevant_calls_through_predict():
    from brace_common.action_schema import Step
    from brace_memory.lookahead import Projection, candidates

    asked = []

    def predict(agent: str, step: Step):
        asked.append(step.call())
        if step.action == "pick":
            return Projection(True, "picked", state(5, 0, holding=True))
        if step.action == "place":
            return Projection(False, "agent_0 holds nothing", None)
        return None  # the world did not answer in time

    system = MemorySystem(MemorySystemConfig(["lookahead"], lookahead_candidates=3))
    calls = [Step("move_to", {"target": t}) for t in ("shelf_1", "dock_0", "park_0")] + [
        Step("pick", {"object": "box_1"}), Step("place", {"object": "box_1", "target": "dock_0"})]
    system.on_schema(calls)
    system.on_world_state(state(0, 0, action="pick"))
    assert system.retrieve("agent_0", "box_1", 0, 10_000, chars).lines == []   # no predict: nothing projected
    system.predict = predict
    state_now = state(0, 0)
    system.on_world_state(WorldState("warehouse", 0, 0, state_now.entities, state_now.relations,
                                     (AgentActivity("agent_0", Activity.EXECUTING, "pick", '{"object": "box_1"}'),)))
    got = system.retrieve("agent_0", "deliver box_1 to dock_0", 0, 10_000, chars)
    assert asked[0] == 'pick{"object": "box_1"}' and len(asked) == 3   # the current step first
    assert got.lines[0].startswith("lookahead: pick(object=box_1) -> ok: + agent_0 holding box_1")
    assert "lookahead: place(object=box_1, target=dock_0) -> fails: agent_0 holds nothing" in got.lines
    assert system.counts["lookahead_projected"] == 2 and system.counts["lookahead_unanswered"] == 1
    assert [s.action for s in candidates(calls, "dock_0", limit=2)] == ["move_to", "place"]
    assert candidates([], "", [Step("wait", {"steps": 1})]) == [Step("wait", {"steps": 1})]


def test_an_end_that_comes_after_the_next_episodes_first_state_keeps_the_finished_episode():
    system = MemorySystem(MemorySystemConfig(["experience"]))
    for step, x in enumerate([0, 1, 2]):
        system.on_world_state(state(step, x, episode=0))
    system.on_world_state(state(0, 7, episode=1))   # topics are not ordered: the next episode's state came first
    assert system.end_episode("e0", True, 3, episode=("warehouse", 0)) == 1
    (record,) = system.store.records("agent_0", RecordKind.EXPERIENCE)
    assert len(record.fields["keys"]) == 3
    assert system.end_episode("e5", True, 3, episode=("warehouse", 5)) == 0   # no such session: nothing kept
