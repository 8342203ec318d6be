"""The audit report's core: which episodes a bag holds whole (EpisodeLedger), and the trigger table's ReCAP counts."""

from __future__ import annotations

from brace_audit.audit_report import EpisodeLedger


def test_complete_episodes_and_late_calls_are_no_problem():
    ledger = EpisodeLedger()
    ledger.start(0, 1_000_000_000)
    ledger.call(1_500_000_000)
    ledger.end(0, 2_000_000_000)
    ledger.call(2_100_000_000)  # an answer in flight when the episode ended
    ledger.start(1, 3_000_000_000)
    ledger.end(1, 4_000_000_000)
    assert ledger.problems() == [] and not ledger.incomplete()
    assert (ledger.spans[0].calls, ledger.spans[0].late_calls) == (1, 1)


def test_a_start_without_its_end_is_named_with_its_calls():
    ledger = EpisodeLedger()
    ledger.start(0, 1_000_000_000)
    ledger.end(0, 2_000_000_000)
    ledger.start(1, 3_000_000_000)
    for t in range(5):
        ledger.call(3_100_000_000 + t)
    (problem,) = ledger.problems()
    assert problem.startswith("episode 1 incomplete: started 2.0 s into the bag, no end") and "5 calls" in problem


def test_an_end_without_its_start_and_calls_before_any_start_are_named():
    ledger = EpisodeLedger()
    ledger.call(500)
    ledger.call(600)
    ledger.start(0, 1_000)
    ledger.start(1, 2_000)  # episode 0's end was lost
    ledger.end(2, 3_000)    # episode 2's start was lost
    problems = ledger.problems()
    assert [p.split(":")[0] for p in problems] == ["episode 0 incomplete", "episode 1 incomplete",
                                                   "episode 2 incomplete", "2 calls recorded before the first "
                                                                           "episode start (without their episode)"]
    assert "no start in the bag" in problems[2]


def test_a_bag_without_episodes_has_no_episode_problem():
    ledger = EpisodeLedger()
    ledger.call(1)  # a control stack whose bridge publishes no episodes
    assert ledger.problems() == []


def test_the_trigger_table_counts_recaps_calls_by_kind_and_the_refinements_suppressed():
    from brace_audit.audit_report import CallRow, RunRecords, trigger_rows
    from brace_common.replanning import Decision, Trigger
    from brace_common.vocabulary import CallStatus, Mode, Reason, RecapKind, TriggerKind

    def call(kind: RecapKind, depth: int) -> CallRow:
        return CallRow(0, "a", CallStatus.OK, 10.0, 100.0, True, 50, 40, recap_call=int(kind), depth=depth)

    def decision(kind: TriggerKind, admitted: bool) -> tuple[int, Decision]:
        reason, mode = (Reason.GATE_OPEN, Mode.PARTIAL_REPLAN) if admitted else (Reason.COOLDOWN, Mode.DEFER_REPLAN)
        return 0, Decision("d", Trigger(kind, "a", 1), admitted, reason, mode)

    run = RunRecords(calls=[call(RecapKind.DECOMPOSE, 0), call(RecapKind.DECOMPOSE, 1), call(RecapKind.REFINE, 1),
                            call(RecapKind.REUSE, 0), call(RecapKind.NONE, 0)],
                     decisions=[decision(TriggerKind.REFINE, False), decision(TriggerKind.REFINE, True),
                                decision(TriggerKind.PERIODIC, False)], duration_s=60.0)
    row = trigger_rows(run)
    assert (row["decompositions"], row["refinements"], row["reuses"]) == (2, 1, 1)
    assert (row["refinements_suppressed"], row["max_depth"], row["suppressed_cooldown"]) == (1, 1, 2)


def test_the_summary_counts_the_steps_the_veto_refused():
    from brace_audit.audit_report import CallRow, RunRecords, report, summary
    from brace_common.vocabulary import CallStatus

    calls = [CallRow(0, "a", CallStatus.OK, 10.0, 100.0, True, 50, 40, vetoed=1),
             CallRow(0, "a", CallStatus.PLANNER_ERROR, 10.0, 100.0, True, 50, 40, vetoed=3),
             CallRow(0, "a", CallStatus.OK, 10.0, 100.0, True, 50, 40)]
    row = summary(RunRecords(calls=calls, duration_s=60.0))
    assert (row["steps_vetoed"], row["planner_errors"]) == (4, 1)
    assert "steps_vetoed" in report([RunRecords(calls=calls, duration_s=60.0)])
