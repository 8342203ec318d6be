"""A world's run of episodes (ROS-free): which episode is running, its seed, the plans its agents received,
the results so far, and when the run is done."""

from __future__ import annotations

from typing import Generic, Optional, TypeVar

R = TypeVar("R")


class EpisodeError(RuntimeError):
    """An episode transition that does not fit the run's state (a start after the last episode, an end with
    none running)."""


class EpisodeBook(Generic[R]):
    """Episodes 0, 1, ... of a run; episode e uses seed `seed + e` (0 for a world without seeds: `seed` None);
    done once `episodes` have ended (never when `episodes` is None)."""

    def __init__(self, episodes: Optional[int] = None, seed: Optional[int] = 0) -> None:
        if episodes is not None and episodes < 1:
            raise ValueError(f"episodes must be at least 1 (got {episodes})")
        self.episodes = episodes
        self.base_seed = seed
        self.episode = -1        # index of the current (or last) episode
        self.running = False
        self.done = False
        self.plans = 0           # plans this episode's agents received
        self.agreeing = 0        # of which the first step was the oracle's on arrival
        self.results: list[R] = []

    @property
    def seed(self) -> int:
        """The seed of the current (or last, or first) episode (0 in a world without seeds)."""
        return 0 if self.base_seed is None else self.base_seed + max(self.episode, 0)

    def start(self) -> int:
        """Begin the next episode (its plan counts at zero); its index."""
        if self.done:
            raise EpisodeError(f"the run's {self.episodes} episodes are over")
        if self.running:
            raise EpisodeError(f"episode {self.episode} is still running")
        self.episode += 1
        self.running = True
        self.plans = self.agreeing = 0
        return self.episode

    def count_plan(self, agrees: bool = False) -> None:
        """A plan of this episode reached one of its agents (`agrees`: its first step was the oracle's)."""
        self.plans += 1
        self.agreeing += int(agrees)

    def end(self, result: Optional[R] = None) -> bool:
        """Close the running episode, keeping its `result`; True when it was the run's last."""
        if not self.running:
            raise EpisodeError("no episode is running")
        self.running = False
        if result is not None:
            self.results.append(result)
        self.done = self.episodes is not None and self.episode + 1 >= self.episodes
        return self.done

    def rearm(self) -> None:
        """Allow further episodes after the run was done (a lifecycle world configured again); the index goes on."""
        self.done = self.running = False

    def progress(self) -> str:
        """'episode e/N' (1-based; N is "-" without a limit)."""
        total = self.episodes if self.episodes is not None else "-"
        return f"episode {max(self.episode, 0) + 1}/{total}"
