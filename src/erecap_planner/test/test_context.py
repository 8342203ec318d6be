"""Context buffer: blocks, growth, exact token labels through the chat template."""

from __future__ import annotations

import pytest

from brace_common.vocabulary import Block
from erecap_planner.context import ContextBuffer, ContextLimits, Entry
from erecap_planner.testing import byte_tokenizer


def buffer(history: int = 5) -> ContextBuffer:
    c = ContextBuffer()
    c.add(Entry("a", 0, Block.TASK, "fetch cup_3 to dock_2", "task"))
    c.add(Entry("a", 0, Block.CONSTRAINTS, "never enter aisle 4", "constraint"))
    for t in range(history):
        c.add(Entry("a" if t % 2 else "b", t, Block.HISTORY, f"event {t}"))
    c.add(Entry("b", 3, Block.STATE, "at (1, 2)"))
    c.add(Entry("b", 4, Block.STATE, "at (1, 3)"))  # replaces the older state of b
    c.add(Entry("b", 4, Block.COORDINATION, "b -> a: I hold the corridor", "message"))
    return c


def test_render_labels_every_token_and_round_trips():
    tok = byte_tokenizer()
    ctx = buffer().render(tok, "a", "next step for a?")
    assert tok.decode(ctx.token_ids) == ctx.text
    assert len(ctx.token_ids) == len(ctx.protected) == len(ctx.entry_of_token)
    assert "at (1, 2)" not in ctx.text and "at (1, 3)" in ctx.text
    spans = ctx.entry_spans()
    for index, tokens in spans.items():
        entry = ctx.entries[index]
        assert tok.decode([ctx.token_ids[i] for i in tokens]) == entry.line() + "\n"
        # Protected blocks are protected where they concern agent a: its entries, and b's message to it.
        concerns_a = entry.agent_id == "a" or "-> a:" in entry.text
        assert all(ctx.protected[i] == (entry.block != Block.HISTORY and concerns_a) for i in tokens)
    assert any(e.block == Block.STATE and e.agent_id == "b" for e in ctx.entries)  # b's state: present, prunable
    # What concerns a (its task, b's message to it) closes the context, after the history, next to the request.
    focus = ctx.text.index("FOR a:\n")
    assert ctx.text.index("HISTORY:") < focus < ctx.text.index("fetch cup_3") < ctx.text.index("I hold") < \
        ctx.text.index("REQUEST:")
    assert "TASK:" not in ctx.text and "COORDINATION:" not in ctx.text  # nothing else is in those blocks
    # The request and the chat template are protected, the history is not.
    assert ctx.protected[-1] and ctx.protected[0]
    assert not all(ctx.protected)


def test_context_grows_with_time_and_agents():
    tok = byte_tokenizer()
    sizes = [buffer(h).token_count(tok, "a", "go") for h in (0, 10, 20)]
    assert sizes[0] < sizes[1] < sizes[2]


@pytest.mark.parametrize("bad", [Entry("", 0, Block.HISTORY, "x"), Entry("a", 0, Block.HISTORY, "  ")])
def test_bad_entries_are_rejected(bad):
    with pytest.raises(ValueError):
        ContextBuffer().add(bad)


def test_history_cap_drops_oldest():
    c = ContextBuffer(max_history=3)
    for t in range(5):
        c.add(Entry("a", t, Block.HISTORY, f"e{t}"))
    assert [e.step for e in c.history] == [2, 3, 4] and c.dropped == 2


def test_stable_first_layout_shares_the_prefix_across_agents_and_steps():
    tok = byte_tokenizer()
    c = buffer(6)
    c.add(Entry("b", 0, Block.TASK, "fetch shoe_5 to dock_1", "task"))
    c.add(Entry("a", 4, Block.STATE, "at (0, 0)"))
    for_a, for_b = (c.render(tok, agent, f"next step for {agent}?", layout="stable_first") for agent in ("a", "b"))
    # Everything up to the agents' states is the same for both agents: the log, whole and in arrival order,
    # as runs of one block under its title (a block may open several runs).
    shared = for_a.text.index("STATE:")
    assert for_a.text[:shared] == for_b.text[:shared] and "HISTORY:" in for_a.text[:shared]
    titles = [line for line in for_a.text[:shared].splitlines()
              if line in ("TASK:", "CONSTRAINTS:", "HISTORY:", "COORDINATION:")]
    assert titles == ["TASK:", "CONSTRAINTS:", "HISTORY:", "COORDINATION:", "TASK:"]
    # The agent's own task and the message to it are repeated next to the request, protected there only.
    focus = for_a.text.index("FOR a:\n")
    assert for_a.text.index("fetch cup_3", focus) > focus and for_a.text.index("I hold", focus) > focus
    spans = for_a.entry_spans()
    protected_copies = [all(for_a.protected[i] for i in spans[k]) for k, e in enumerate(for_a.entries)
                        if e.text == "fetch cup_3 to dock_2"]
    assert protected_copies == [False, True]
    with pytest.raises(ValueError, match="layout"):
        c.render(tok, "a", "x", layout="mixed")


@pytest.mark.parametrize("block", [Block.HISTORY, Block.COORDINATION, Block.TASK])
def test_stable_first_prompt_only_grows_at_the_end_of_the_log(block):
    """A new entry of any block keeps the earlier prompt as the prefix of the later one, up to the states."""
    tok = byte_tokenizer()
    c = buffer(6)
    before = c.render(tok, "a", "next step for a?", layout="stable_first")
    c.add(Entry("b", 9, block, "b -> a: task done, corridor free"))
    c.add(Entry("b", 9, Block.STATE, "at (2, 3)"))
    later = c.render(tok, "b", "next step for b?", layout="stable_first")
    grown = later.text.index("[t=9 b] b -> a: task done")
    log_end = before.text.index("STATE:")
    assert later.text[:log_end] == before.text[:log_end] and grown >= log_end
    p = 0
    while before.token_ids[p] == later.token_ids[p]:
        p += 1
    assert p >= len(tok(before.text[:log_end], add_special_tokens=False)["input_ids"]) - 1


def test_history_cap_keeps_the_log_order():
    c = ContextBuffer(max_history=2)
    c.add(Entry("a", 0, Block.TASK, "t"))
    for t in range(3):
        c.add(Entry("a", t, Block.HISTORY, f"e{t}"))
        c.add(Entry("a", t, Block.COORDINATION, f"m{t}"))
    assert [e.text for e in c.log] == ["t", "m0", "e1", "m1", "e2", "m2"] and c.dropped == 1


@pytest.mark.parametrize("layout", ["focus", "stable_first"])
def test_a_token_cap_leaves_out_the_oldest_history_and_keeps_the_rest(layout):
    tok = byte_tokenizer()
    c = buffer(history=0)
    for t in range(20_000):  # far beyond any cap: the prompt is cut before tokenising it all
        c.add(Entry("b", t, Block.HISTORY, f"event {t}: shelf {t % 9} checked"))
    ctx = c.render(tok, "a", "next step for a?", layout=layout, max_tokens=2_000)
    assert len(ctx) <= 2_000 and ctx.evicted > 0
    assert "event 19999" in ctx.text and "event 0:" not in ctx.text  # the newest history stays
    assert "fetch cup_3 to dock_2" in ctx.text and "I hold the corridor" in ctx.text  # protected blocks stay
    assert len(c.render(tok, "a", "next step for a?", layout=layout)) > 2_000  # without the cap nothing is cut


def test_a_flood_of_an_agents_task_entries_keeps_its_newest_within_the_block_limits():
    c = ContextBuffer(limits=ContextLimits(block_entries=5, block_chars=1_000))
    for i in range(300):
        c.add(Entry("a", i, Block.TASK, f"t{i} " + "x" * 150, "task"))
    c.add(Entry("b", 0, Block.TASK, "b's own task", "task"))
    tasks = [e for e in c.task if e.agent_id == "a"]
    assert [e.step for e in tasks] == [295, 296, 297, 298, 299]  # entries: 5 stay, the oldest yielded
    assert c.dropped_by["block_entries"] == 295 and c.dropped == 295 and "b's own task" in c.task[-1].text
    for i in range(10):
        c.add(Entry("a", 300 + i, Block.COORDINATION, "m" * 400, "message"))
    assert sum(len(e.text) for e in c.coordination) <= 1_000 and c.dropped_by["block_chars"] == 8
    assert c.chars == sum(len(e.text) for e in c.log) + sum(len(e.text) for e in c.state.values())


def test_the_totals_make_the_oldest_history_yield_first_then_the_oldest_of_any_block():
    c = ContextBuffer(limits=ContextLimits(total_entries=10, total_chars=10_000))
    c.add(Entry("a", 0, Block.TASK, "oldest task", "task"))
    c.add(Entry("a", 0, Block.STATE, "at dock"))
    for t in range(12):
        c.add(Entry("b", t, Block.HISTORY, f"event {t}"))
    assert len(c) == 10 and c.dropped_by["total_entries"] == 4 and c.task and "at dock" in c.state["a"].text
    assert [e.step for e in c.history] == [4, 5, 6, 7, 8, 9, 10, 11]
    for agent in range(12):  # protected entries of many agents: no history left, the oldest of any block yields
        c.add(Entry(f"x{agent}", 20, Block.COORDINATION, f"x{agent} -> a: hold", "message"))
    assert len(c) == 10 and not c.history and not c.task and "a" not in c.state
    assert [e.agent_id for e in c.coordination] == [f"x{i}" for i in range(2, 12)]
    c.add(Entry("y", 30, Block.TASK, "z" * 9_990, "task"))  # the characters: the oldest yield until it fits
    assert c.chars <= 10_000 and c.dropped_by["total_chars"] > 0 and c.task[-1].agent_id == "y"


def test_forget_before_drops_the_previous_episodes_entries_at_the_start_instant_too():
    """A world on simulated time stamps its last step and the next start alike: at that instant only step 0 is new."""
    c = ContextBuffer()
    c.add(Entry("a", 59, Block.HISTORY, "last step of episode 0", stamp=10.0))
    c.add(Entry("a", 59, Block.STATE, "state at the end of episode 0", stamp=10.0))
    c.add(Entry("a", 0, Block.TASK, "task of episode 1", "task", stamp=10.0))
    c.add(Entry("b", 1, Block.HISTORY, "episode 1, step 1", stamp=10.5))
    assert c.forget_before(10.0) == 2
    assert [e.text for e in c.log] == ["task of episode 1", "episode 1, step 1"] and not c.state

def test_forget_and_snapshot_keep_the_limits_consistent():
    c = ContextBuffer(limits=ContextLimits(block_entries=2))
    for t in range(4):
        c.add(Entry("a", t, Block.TASK, f"t{t}", "task", stamp=float(t)))
        c.add(Entry("a", t, Block.HISTORY, f"h{t}", stamp=float(t)))
    copy = c.snapshot()
    assert c.forget_before(2.5) == 4 and [e.text for e in c.log] == ["t3", "h3"]
    assert len(copy) == 6 and c.chars == 4 and copy.chars == 12
    for t in range(4, 7):
        c.add(Entry("a", t, Block.TASK, f"t{t}", "task", stamp=float(t)))
    assert [e.text for e in c.task] == ["t5", "t6"] and [e.text for e in copy.task] == ["t2", "t3"]


def test_a_token_cap_makes_the_protected_blocks_yield_oldest_first_after_the_history():
    tok = byte_tokenizer()
    c = ContextBuffer(limits=ContextLimits(block_entries=10_000, block_chars=10**8, total_chars=10**8))
    for t in range(100):
        c.add(Entry("a", t, Block.TASK, f"task {t:03d} " + "x" * 400, "task"))
        c.add(Entry("b", t, Block.COORDINATION, f"b -> c: message {t:03d} " + "y" * 400, "message"))
        c.add(Entry("b", t, Block.HISTORY, f"event {t:03d}", "observation"))
    c.add(Entry("b", 100, Block.STATE, "b at dock"))
    c.add(Entry("a", 100, Block.STATE, "a at shelf"))
    seen = []
    ctx = c.render(tok, "a", "next step for a?", max_tokens=8_000, checkpoint=lambda: seen.append(1))
    assert len(ctx) <= 8_000 and ctx.evicted > 0 and seen
    assert "event" not in ctx.text and "message" not in ctx.text  # history, then what concerns others only
    assert "task 099" in ctx.text and "task 000" not in ctx.text and "a at shelf" in ctx.text
    with pytest.raises(RuntimeError, match="stop"):
        c.render(tok, "a", "next step for a?", max_tokens=8_000, checkpoint=_stop)


def _stop() -> None:
    raise RuntimeError("stop")


@pytest.mark.parametrize("layout", ["focus", "stable_first"])
@pytest.mark.parametrize("cap", [1_200, 2_000])
def test_what_a_token_cap_leaves_out_is_the_head_of_the_yield_order(layout, cap):
    """Fitting counted lines and trimming the rendered prompt make entries yield by the one rule: what leaves a
    prompt is exactly the first `evicted` entries of `yield_order`, whichever of the two cut them."""
    tok = byte_tokenizer()
    c = buffer(history=0)
    for t in range(60):
        c.add(Entry("b", t, Block.HISTORY, f"event {t}: shelf {t % 9} checked"))
        c.add(Entry("c", t, Block.COORDINATION, f"c -> b: message {t}", "message"))
    c.add(Entry("c", 60, Block.STATE, "c at dock"))
    blocks = c.blocks(layout)
    unique = list({id(e): e for _, block_entries in blocks for e in block_entries}.values())
    ctx = c.render(tok, "a", "next step for a?", layout=layout, max_tokens=cap)
    assert len(ctx) <= cap and ctx.evicted > 0
    left_out = {id(unique[i]) for i in c.yield_order("a", unique)[:ctx.evicted]}
    assert {id(e) for e in ctx.entries} == {id(e) for e in unique} - left_out
