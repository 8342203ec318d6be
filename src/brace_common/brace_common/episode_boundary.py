"""Which messages belong to an earlier episode than the current one.

Topics are not ordered with each other: a world's last states and context entries of an episode can reach a node
after the Episode START of the next one. Every node that resets at START drops them by this one rule, on the
world's stamps: stamped before the start, or at its very instant with a step past the first (a world on simulated
time stamps its last step, the episode's end and the next start alike).
"""

from __future__ import annotations


def before_episode(stamp_s: float, step: int, start_s: float) -> bool:
    """Whether a message stamped `stamp_s` at world step `step` is from before the episode that started at
    `start_s` (0: no start seen, or unstamped messages: nothing is dropped)."""
    if not start_s or not stamp_s:
        return False
    return stamp_s < start_s or (stamp_s == start_s and step > 0)
