"""Whether what the frames show contradicts the requested step (OmniAct's contradicts_requested_action), ROS-free.

The perceiver's diff is made without the step; `StepCheck` is the separate comparison with it, during the step and
at its end, with the evidence's confidence. What each skill expects and what contradicts it:
docs/visual_verifier.md, "What it does".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.action_schema import LOCATION_PARAMETERS, OBJECT_PARAMETERS, named_parameter

from .scene_diff import GONE, GRIPPER, HIDDEN, TABLE, Perception, Sighting


@dataclass(frozen=True)
class EndCheck:
    """The frame after a step ended: whether it shows the step's expected result, and a contradiction of a reported
    success (None when there is none)."""

    achieved: bool
    contradiction: Optional[Contradiction]


@dataclass(frozen=True)
class Contradiction:
    """A step the frames contradict: why, and how sure."""

    detail: str
    confidence: float


class StepCheck:
    """One physical step watched frame by frame: `frame` during it, `ended` when the executor says it ended."""

    def __init__(self, action: str, parameters: Mapping[str, Any], first: Perception, regions: frozenset[str],
                 confirm_frames: int = 2, evidence_pixels: int = 60) -> None:
        self.action = action
        self.regions = regions
        self.object = named_parameter(parameters, OBJECT_PARAMETERS)
        self.target = named_parameter(parameters, LOCATION_PARAMETERS)
        self.first = first
        self.confirm_frames = confirm_frames
        self.evidence_pixels = evidence_pixels
        self.recent: deque[Perception] = deque(maxlen=confirm_frames)
        self.held_seen = first.place(self.object) == GRIPPER if self.object else False
        self.frames = 0

    def frame(self, now: Perception) -> Optional[Contradiction]:
        """A frame during the step: a contradiction once `confirm_frames` frames in a row show one."""
        self.frames += 1
        self.recent.append(now)
        if self.object and now.place(self.object) == GRIPPER:
            self.held_seen = True
        if len(self.recent) < self.confirm_frames:
            return None
        for name, first in self.first.sightings.items():
            if first.seen and all(p.place(name) == GONE for p in self.recent):
                return self._sure(f"{name} removed: it was at {first.where()} and is now neither there, nor in the "
                                  "gripper, nor hidden behind anything", first)
        if self.object and self.held_seen and self.action != "push" and \
                all(p.place(self.object) == TABLE for p in self.recent):
            fell = self.recent[-1].sightings[self.object]
            return self._sure(f"{self.object} fell: it was in the gripper during {self.action} and now lies on the "
                              f"{fell.where()}", fell)
        return None

    def ended(self, after: Perception, success: bool) -> EndCheck:
        """The frame after the step ended (the executor's outcome): whether it shows the expected result (OmniAct
        Table 6's prediction); a success it contradicts (the object seen elsewhere, or gone) is a Contradiction."""
        expected = self.expected_place()
        if expected is None or not self.object:
            return EndCheck(success, None)
        place = after.place(self.object)
        achieved = place not in (GONE, GRIPPER, HIDDEN) if expected == TABLE else place == expected
        if achieved or not success or place == HIDDEN:
            return EndCheck(achieved, None)
        sighting = after.sightings.get(self.object)
        evidence = sighting if sighting is not None and sighting.seen else self.first.sightings.get(self.object)
        where = sighting.where() if sighting is not None else GONE
        unchanged = " (unchanged at its source)" if self._unchanged(after) else ""
        return EndCheck(False, Contradiction(f"{self.action} reported success but {self.object} is at {where}"
                                             f"{unchanged}, not {expected}", self.share(evidence)))

    def expected_place(self) -> Optional[str]:
        """Where the step's object should be when it succeeded (None: the skill has no visible expectation)."""
        if self.action == "pick":
            return GRIPPER
        if self.action == "place" and self.target:
            return self.target if self.target in self.regions else TABLE
        if self.action == "push":     # onto a region the perceiver knows (PushT's goal), else anywhere on the table
            return self.target if self.target in self.regions else TABLE
        return None

    def support(self, after: Perception) -> float:
        """How much the frame shows of the step's object (`share`; 1 for a step without an object): the confidence of
        a verdict that finds nothing wrong."""
        if not self.object:
            return 1.0
        return self.share(after.sightings.get(self.object))

    def share(self, sighting: Optional[Sighting]) -> float:
        """How much of the object `sighting` saw, 0..1: the perceiver's own `support` where it gives one, else its
        pixels over `evidence_pixels` (at most 1); 0 for no sighting."""
        if sighting is None:
            return 0.0
        if sighting.support is not None:
            return min(1.0, max(0.0, sighting.support))
        return min(1.0, sighting.pixels / self.evidence_pixels)

    def _unchanged(self, after: Perception) -> bool:
        first, now = self.first.sightings.get(self.object), after.sightings.get(self.object)
        return bool(first and now and first.seen and now.seen and first.place == now.place)

    def _sure(self, detail: str, evidence: Sighting) -> Contradiction:
        return Contradiction(detail, self.share(evidence))
