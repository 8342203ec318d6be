"""EpisodeBook: a world's episodes, seeds, plan counts and the end of its run; the world feed's outcomes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from brace_common.vocabulary import EntryKind
from brace_common.world_episodes import EpisodeBook, EpisodeError
from brace_common.world_feed import outcomes


def test_episodes_count_up_with_their_seeds_and_the_run_ends_after_the_last():
    book: EpisodeBook[str] = EpisodeBook(episodes=2, seed=7)
    assert (book.episode, book.seed, book.done, book.progress()) == (-1, 7, False, "episode 1/2")
    assert book.start() == 0 and book.seed == 7 and book.running
    assert not book.end("first")
    assert book.start() == 1 and book.seed == 8 and book.progress() == "episode 2/2"
    assert book.end("second") and book.done and not book.running
    assert book.results == ["first", "second"]
    with pytest.raises(EpisodeError):
        book.start()


def test_plans_are_counted_per_episode():
    book: EpisodeBook[str] = EpisodeBook()
    book.start()
    book.count_plan(agrees=True)
    book.count_plan()
    assert (book.plans, book.agreeing) == (2, 1)
    book.end()
    assert (book.plans, book.agreeing) == (2, 1)  # the ended episode's counts stay readable for its record
    book.start()
    assert (book.plans, book.agreeing) == (0, 0)
    assert book.results == [] and not book.done  # no limit: never done


def test_transitions_out_of_order_are_refused():
    book: EpisodeBook[str] = EpisodeBook(episodes=1)
    with pytest.raises(EpisodeError):
        book.end()
    book.start()
    with pytest.raises(EpisodeError):
        book.start()
    with pytest.raises(ValueError):
        EpisodeBook(episodes=0)


def test_an_unseeded_world_says_seed_0_and_a_rearmed_run_goes_on_counting():
    book: EpisodeBook[str] = EpisodeBook(episodes=1, seed=None)
    book.start()
    assert book.seed == 0 and book.end()
    book.rearm()
    assert not book.done and book.start() == 1 and book.seed == 0
    assert book.end() and book.done


@dataclass
class Event:
    action: str
    kind: EntryKind


def test_only_skill_outcomes_and_failure_traces_are_outcomes():
    events = [Event("move_to", EntryKind.ACTION_OUTCOME), Event("pick", EntryKind.FAILURE_TRACE),
              Event("", EntryKind.ACTION_OUTCOME), Event("move_to", EntryKind.OBSERVATION)]
    assert outcomes(events) == events[:2]
