"""OmniAct's LLM summariser hook on episodic memory: asynchronous, bounded, and never losing the template record."""

from __future__ import annotations

import threading

import pytest

from brace_memory.episodic import LIST_LIMITS, RECORD_KEYS, TEXT_LIMITS, Segment, record_line
from brace_memory.records import RecordKind
from brace_memory.store import MemoryStore
from brace_memory.summary import (
    MAX_SOURCE_ENTRIES,
    SummaryFailed,
    SummaryInvalid,
    SummaryRequest,
    SummaryWorker,
    source_lines,
    summary_fields,
    summary_prompt,
)
from brace_memory.system import MemorySystem, MemorySystemConfig

WAIT_S = 10.0  # bound of every wait on the worker (never reached when it works)


def summary(topic: str = "delivery of box_7", **changes) -> dict:
    return {"topic": topic, "request": "deliver box_7 to dock_2", "actions": ["pick(object=box_7)"],
            "outcome": "place failed: dock_2 closed", "observations": ["dock_2 closed at t=7"],
            "open_questions": ["when does dock_2 open?"], "evidence": ["place(object=box_7) failed"], **changes}


class Scripted:
    """A summariser that answers from a script: a dict, or an exception to raise; optionally held on a gate."""

    def __init__(self, *answers, gate: threading.Event | None = None) -> None:
        self.answers = list(answers)
        self.gate = gate
        self.entered = threading.Event()
        self.asked: list[SummaryRequest] = []

    def __call__(self, request: SummaryRequest, cancelled):
        self.asked.append(request)
        self.entered.set()
        if self.gate is not None:
            while not self.gate.wait(0.01):
                if cancelled():
                    raise SummaryFailed("cancelled", "memory closed")
        answer = self.answers.pop(0) if self.answers else summary(f"summary {len(self.asked)}")
        if isinstance(answer, BaseException):
            raise answer
        return answer


def fold(system: MemorySystem, agent: str, step: int) -> None:
    """One segment of `agent` folded at `step` (a failure: a boundary)."""
    system.on_entry(agent, step, "task", "agent must deliver box_7 to dock_2.")
    system.on_entry(agent, step, "observation", f"at shelf_3, step {step}")
    system.on_entry(agent, step, "failure_trace", f"place(object=box_7) failed at step {step}: dock_2 closed")


def test_a_valid_summary_replaces_the_template_fields_in_place():
    summariser = Scripted(summary())
    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=summariser)
    fold(system, "a", 1)
    fold(system, "a", 2)
    assert system.summaries.wait_idle(WAIT_S)
    first, second = system.episodic.records("a")  # same keys, same order: the summary did not move the record
    assert (first.key, second.key) == ("e000000001", "e000000002")
    assert first.fields == {**summary(), "boundary": "failure"} and (first.first_step, first.last_step) == (1, 1)
    assert record_line(first).startswith("[t=1-1 delivery of box_7] request: deliver box_7 to dock_2 | did: pick")
    assert second.fields["topic"] == "summary 2" and second.fields["boundary"] == "failure"
    counts = system.summaries.counts
    assert (counts["requested"], counts["applied"], counts["pending"]) == (2, 2, 0)
    request = summariser.asked[0]
    assert request.boundary == "failure" and request.record.fields["topic"] == "failure"  # asked with the template
    system.close()


def test_the_store_keeps_the_summary_and_its_update_order(tmp_path):
    system = MemorySystem(MemorySystemConfig(["episodic"]), MemoryStore(tmp_path / "m.sqlite"), summariser=Scripted(summary()))
    fold(system, "a", 1)
    assert system.summaries.wait_idle(WAIT_S)
    fold(system, "a", 2)
    assert system.summaries.wait_idle(WAIT_S)
    system.close()
    with MemoryStore(tmp_path / "m.sqlite") as store:
        records = store.records("a", RecordKind.EPISODIC)
    assert [r.key for r in records] == ["e000000001", "e000000002"]
    assert records[0].fields["topic"] == "delivery of box_7"


@pytest.mark.parametrize("answer, counted", [
    (SummaryFailed("server_error", "HTTP 503"), "failed.server_error"),
    (SummaryFailed("deadline", "no answer within 2 s"), "failed.deadline"),
    (SummaryInvalid("no_json", "prose"), "invalid.no_json"),
    (["a", "list"], "invalid.not_object"),
    ({"topic": "x"}, "invalid.missing_key"),
    (summary(actions=[1, 2]), "invalid.wrong_type"),
    (summary(outcome="  "), "invalid.empty"),
    (RuntimeError("a bug in a summariser"), "failed.error"),
])
def test_an_invalid_or_failed_summary_keeps_the_template_and_is_counted(answer, counted):
    said: list[str] = []
    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=Scripted(answer), log=said.append)
    fold(system, "a", 1)
    assert system.summaries.wait_idle(WAIT_S)
    (record,) = system.episodic.records("a")
    assert record.fields["topic"] == "failure" and record.fields["boundary"] == "failure"
    counts = system.summaries.counts
    outcome = counted.split(".")[0]
    assert counts[counted] == 1 and counts[outcome] == 1 and counts["applied"] == 0
    assert len(said) == 1 and "template record stays" in said[0] and "a/e000000001" in said[0]
    fold(system, "a", 2)  # the worker goes on after a failure
    assert system.summaries.wait_idle(WAIT_S)
    assert system.summaries.counts["applied"] == 1
    system.close()


def test_folding_is_immediate_while_a_summary_runs_and_a_full_queue_drops_the_oldest():
    gate = threading.Event()
    summariser = Scripted(gate=gate)
    system = MemorySystem(MemorySystemConfig(["episodic"], summary_queue=2), summariser=summariser)
    fold(system, "a", 1)
    assert summariser.entered.wait(WAIT_S)  # the worker holds record 1
    for step in (2, 3, 4, 5):
        fold(system, "a", step)  # returns with the summariser held: nothing waits for it
    assert system.folded_through("a") == 5 and len(system.episodic.records("a")) == 5
    lines = system.retrieve("a", "", 6, 10_000, lambda lines: [len(line) for line in lines]).lines
    assert [line.split("]")[0] for line in lines] == [f"[t={s}-{s} failure" for s in (1, 2, 3, 4, 5)]
    counts = system.summaries.counts
    assert (counts["requested"], counts["dropped"], counts["pending"]) == (5, 2, 2)  # records 2 and 3 yielded
    gate.set()
    assert system.summaries.wait_idle(WAIT_S)
    topics = [r.fields["topic"] for r in system.episodic.records("a")]
    assert topics == ["summary 1", "failure", "failure", "summary 2", "summary 3"]
    assert system.summaries.counts["applied"] == 3
    system.close()


def test_a_summary_of_a_record_gone_or_rewritten_meanwhile_is_late():
    gate = threading.Event()
    store = MemoryStore(None, max_records=1)
    system = MemorySystem(MemorySystemConfig(["episodic"]), store, summariser=Scripted(gate=gate))
    fold(system, "a", 1)
    fold(system, "a", 2)  # max_records 1: record 1 is evicted while its summary runs
    gate.set()
    assert system.summaries.wait_idle(WAIT_S)
    counts = system.summaries.counts
    assert (counts["late"], counts["applied"]) == (1, 1)
    (kept,) = system.episodic.records("a")
    assert kept.key == "e000000002" and kept.fields["topic"] == "summary 2"
    system.close()


def test_close_cancels_the_running_summary_drops_the_pending_and_stops_the_worker():
    gate = threading.Event()  # never set: the summariser runs until it is cancelled
    summariser = Scripted(gate=gate)
    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=summariser)
    fold(system, "a", 1)
    assert summariser.entered.wait(WAIT_S)
    fold(system, "a", 2)
    system.close(WAIT_S)
    counts = system.summaries.counts
    assert not system.summaries._thread.is_alive()
    assert (counts["failed.cancelled"], counts["dropped"], counts["pending"]) == (1, 1, 0)
    system.summaries.submit(SummaryRequest(system.episodic.records("a")[0], Segment()))  # after close: dropped
    assert system.summaries.counts["dropped"] == 2
    with pytest.raises(Exception, match="closed"):
        system.episodic.records("b")  # the store closed after the worker


def test_a_summary_that_ignores_the_cancel_is_late_after_close():
    gate, entered, answered = threading.Event(), threading.Event(), threading.Event()

    def stubborn(request, cancelled):
        entered.set()
        gate.wait(WAIT_S)
        answered.set()
        return summary()

    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=stubborn)
    fold(system, "a", 1)
    assert entered.wait(WAIT_S)
    assert not system.summaries.close(timeout_s=0.0)  # still running: it ignores the cancel
    system.close(timeout_s=0.0)
    gate.set()
    assert answered.wait(WAIT_S)
    assert system.summaries.wait_idle(WAIT_S) and system.summaries.counts["late"] == 1


def test_without_a_summariser_or_a_folding_module_no_worker_runs():
    assert MemorySystem(MemorySystemConfig(["episodic"])).summaries is None
    assert MemorySystem(MemorySystemConfig(["reflective"]), summariser=Scripted()).summaries is None
    system = MemorySystem(MemorySystemConfig(["rag_memory"]), summariser=Scripted())
    assert system.summaries is not None
    system.close()
    with pytest.raises(ValueError, match="queue_size"):
        SummaryWorker(Scripted(), lambda request, fields: True, queue_size=0)


def test_summary_fields_cut_to_the_template_limits_and_keep_the_boundary():
    long = "x" * 500
    raw = summary(topic=long, request=None, actions=[f"act {i} " + long for i in range(9)], outcome="done\n  now",
                  observations="one observation", open_questions=None, evidence=["", "e"] * 5, extra="ignored")
    fields = summary_fields(raw, {"topic": "task done", "boundary": "task done"})
    assert list(fields) == [*RECORD_KEYS, "boundary"] and fields["boundary"] == "task done"
    assert len(fields["topic"]) == TEXT_LIMITS["topic"] and fields["request"] == "" and fields["outcome"] == "done now"
    most, chars = LIST_LIMITS["actions"]
    assert len(fields["actions"]) == most and all(len(a) <= chars for a in fields["actions"])
    assert fields["observations"] == ["one observation"] and fields["open_questions"] == []
    assert fields["evidence"] == ["e"] * LIST_LIMITS["evidence"][0]
    with pytest.raises(SummaryInvalid, match="wrong_type: topic"):
        summary_fields(summary(topic=None), {})


def test_the_prompt_is_omniact_s_episodic_prompt_with_the_segment_in_order():
    system = MemorySystem(MemorySystemConfig(["episodic"]))
    system.on_entry("a", 0, "task", "agent a must deliver box_7 to dock_2.")
    segment = Segment()
    for step in range(60):
        segment.add(step, "observation" if step % 2 else "action_outcome", f"entry {step}")
    assert len(source_lines(segment)) == MAX_SOURCE_ENTRIES + 1
    assert source_lines(segment)[0] == "t=0 action_outcome: entry 0" and "(12 entries left out)" in source_lines(segment)
    fold(system, "a", 1)
    (record,) = system.episodic.records("a")
    system_prompt, user = summary_prompt(SummaryRequest(record, Segment(entries=[(1, "observation", "at shelf_3")])))
    assert "episodic interaction log writer" in system_prompt and all(key in system_prompt for key in RECORD_KEYS)
    assert "Agent: a\nTrigger: failure" in user and "t=1-1" in user and "deliver box_7" in user
    assert user.endswith("Source text:\nt=1 observation: at shelf_3")


def test_health_names_each_outcome_and_reason_after_the_prefix():
    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=Scripted(summary(outcome="  ")))
    fold(system, "a", 1)
    assert system.summaries.wait_idle(WAIT_S)
    values = system.health().values
    assert values["memory.summaries.invalid"] == 1 and values["memory.summaries.invalid.empty"] == 1
    assert values["memory.summaries.requested"] == 1 and values["memory.summaries.pending"] == 0
    system.close()
