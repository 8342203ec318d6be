"""The episode-boundary rule: which late messages belong to the previous episode."""

from __future__ import annotations

from brace_common.episode_boundary import before_episode


def test_stamped_before_the_start_is_the_previous_episodes():
    assert before_episode(9.5, 0, 10.0)
    assert before_episode(9.5, 40, 10.0)


def test_at_the_start_instant_only_the_first_step_is_the_new_episodes():
    # a world on simulated time stamps its last step, the episode's end and the next start alike
    assert not before_episode(10.0, 0, 10.0)
    assert before_episode(10.0, 59, 10.0)


def test_after_the_start_everything_is_the_new_episodes():
    assert not before_episode(10.001, 0, 10.0)
    assert not before_episode(12.0, 7, 10.0)


def test_without_a_start_or_a_stamp_nothing_is_dropped():
    assert not before_episode(9.0, 3, 0.0)
    assert not before_episode(0.0, 3, 10.0)
