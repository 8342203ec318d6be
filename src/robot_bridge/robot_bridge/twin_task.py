"""The task on the twin's table (PickFruit or PushT): one bundle of what the twin world, its camera, the /act
stand-in and the kinematic rollout need of it, ROS-free."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from brace_common.episode import EpisodeMetrics
from brace_common.world_state import AgentActivity, WorldState

from .pickfruit import pickfruit_world as pickfruit
from .pickfruit.scene_render import Scene
from .pickfruit.twin_camera import pickfruit_scene
from .pusht import pusht_world as pusht
from .pusht.pusht_camera import pusht_scene

Point = tuple[float, float, float]
TableWorld = Union[pickfruit.PickFruitWorld, pusht.PushTWorld]
TASKS = (pickfruit.WORLD, pusht.WORLD)
"""The twin's tasks (TwinWorldConfig.task)."""


@dataclass(frozen=True)
class TwinTask:
    """A table world and the task-specific functions around it."""

    name: str                                                         # Episode.world / WorldState.world
    world: TableWorld
    skills_text: str                                                  # the constraints entry
    task_text: Callable[[str], str]                                   # an object of the task -> its task entry
    scene_text: Callable[[list[str]], str]                            # describe() -> the state entry
    world_state: Callable[[Any, int, int, AgentActivity, Point, float], WorldState]
    episode_metrics: Callable[[Any, float, int, Mapping[str, int]], EpisodeMetrics]
    scene: Callable[[Any, Point, float], Scene]                       # the camera's view
    policy: Callable[[Callable[[], Point]], Callable]                 # tool reader -> the /act stand-in
    locations: Sequence[str]                                          # the executor's locations entries
    instruction_templates: Sequence[str] = ()                         # the executor's, where not its defaults

    @classmethod
    def of(cls, world: TableWorld) -> TwinTask:
        """The task of `world`."""
        if isinstance(world, pusht.PushTWorld):
            g = world.config.goal_location
            return cls(pusht.WORLD, world, pusht.SKILLS_TEXT, pusht.task_text, pusht.scene_text, pusht.world_state,
                       pusht.episode_metrics, pusht_scene, lambda tool: pusht.PushPolicy(world, tool=tool),
                       (f"{pusht.GOAL}={g[0]:g},{g[1]:g},{g[2]:g}",), (pusht.INSTRUCTION_TEMPLATE,))
        b = world.config.bowl
        return cls(pickfruit.WORLD, world, pickfruit.SKILLS_TEXT, pickfruit.task_text, pickfruit.scene_text,
                   pickfruit.world_state, pickfruit.episode_metrics, pickfruit_scene,
                   lambda tool: pickfruit.TwinPolicy(world, tool=tool), (f"bowl={b[0]:g},{b[1]:g},{b[2]:g}",))

    def render(self, tool: Point, gripper_m: float) -> Scene:
        """The camera's view of the table with the gripper at `tool`."""
        return self.scene(self.world, tool, gripper_m)

