"""The viewer's test path: a world's run through brace-run, its bag through `brace-audit view`'s mapping, the
recording in Rerun's web viewer in headless Chromium, the time cursor on a step, a screenshot, and what a person
would see checked in its pixels. The browser test runs it on the warehouse; bench/viewer.py runs it on every world
and makes the pictures in docs/.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from brace_audit.audit import find_bags
from brace_audit.view_bag import APPLICATION_ID, bag_to_rrd, recording_name
from brace_audit.view_browser import ViewerPage
from brace_audit.view_mapping import SLO_COLOUR
from brace_audit.view_scene import agent_rgb
from brace_audit.view_server import ViewerServer
from brace_bringup.runner import main as run_main
from brace_common.local_http import free_port

from .browser_opt_out import browser_opted_out  # noqa: F401 (the test path's users ask it here too)


@dataclass(frozen=True)
class WorldRun:
    """How the test path runs one world: brace-run's run, its variant and the settings that keep it short
    (`{port}`: a free port the run needs, e.g. the twin's /act stand-in)."""

    run: str
    variant: str
    sets: tuple[str, ...]
    agents: int


WORLDS: dict[str, WorldRun] = {
    "warehouse": WorldRun("demo", "brace_erecap", ("embedded_sim.max_steps=24", "embedded_sim.step_period_s=0.05",
                                                   "embedded_sim.hold_while_planning=true"), 4),
    "airsim": WorldRun("airsim_k8", "brace_erecap", ("airsim_bridge.max_steps=40", "airsim_bridge.step_period_s=0.05"),
                       8),
    "pickfruit": WorldRun("piper_twin", "brace_erecap", (
        "twin_world.max_episode_s=25.0", "twin_world.act_port={port}", "twin_world.can_port=twin_view_{port}",
        "piper_arm.can_port=twin_view_{port}", "openvla_executor.server_url=http://127.0.0.1:{port}/act"), 1),
    "pusht": WorldRun("piper_twin_pusht", "brace_erecap", (
        "twin_world.max_episode_s=25.0", "twin_world.act_port={port}", "twin_world.can_port=twin_view_{port}",
        "piper_arm.can_port=twin_view_{port}", "openvla_executor.server_url=http://127.0.0.1:{port}/act"), 1),
    "textworld": WorldRun("textworld", "brace_erecap", ("textworld_world.episodes=1", "textworld_world.max_steps=16"),
                          1),  # 16 commands: a game's first rooms (the shipped planner's calls run to their deadline)
}
"""Every world the viewer draws, as the test path runs it."""


def record_world(world: str, output: Path, model_sets: tuple[str, ...] = ()) -> Path:
    """Run `world` for one episode through brace-run (`model_sets`: the planner's settings, e.g. a tiny model);
    the run folder. RuntimeError when brace-run fails (with its tables, which it prints, as the reason)."""
    spec = WORLDS[world]
    port = free_port()
    argv = [spec.run, "--variants", spec.variant, "--episodes", "1", "--output", str(output), "--quiet"]
    for item in (*model_sets, *spec.sets):
        argv += ["--set", item.format(port=port)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = run_main(argv)
    if code != 0:
        raise RuntimeError(f"brace-run {' '.join(argv)} failed ({code}): {printed.getvalue()[-2000:]}")
    folders = sorted(p for p in output.iterdir() if p.is_dir())
    return folders[-1]


# ---------------------------------------------------------------------- what a person sees

@dataclass(frozen=True)
class Region:
    """A part of the page, as fractions of its width and height."""

    left: float
    top: float
    right: float
    bottom: float

    def of(self, image: np.ndarray) -> np.ndarray:
        """This region's pixels."""
        h, w = image.shape[:2]
        return image[int(self.top * h):int(self.bottom * h), int(self.left * w):int(self.right * w)]


# where view_mapping.blueprint() puts each view on a PAGE_SIZE page (columns 3:2; the scene above the story 3:2;
# latency, tokens and events 2:2:3 on the right), inside the viewer's top bar and its time panel
SCENE = Region(0.0, 0.07, 0.58, 0.45)
LATENCY = Region(0.62, 0.07, 1.0, 0.24)
EVENTS = Region(0.62, 0.52, 1.0, 0.74)


def near(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    """How many pixels are within `tolerance` of `rgb` on every channel."""
    return int((np.abs(pixels[..., :3].astype(int) - np.array(rgb)).max(axis=-1) <= tolerance).sum())


def text_pixels(pixels: np.ndarray) -> int:
    """Pixels much darker than the panel's light background: the text drawn there."""
    return int((pixels[..., :3].astype(int).mean(axis=-1) < 110).sum())


@dataclass
class Seen:
    """What a screenshot shows where a person would look."""

    agents: dict[str, int]           # agent -> pixels of its own colour in the scene (its body and label)
    slo_line: int                    # SLO_t-coloured pixels in the latency plot
    event_text: int                  # text pixels in the event log
    problems: list[str] = field(default_factory=list)


def what_a_person_sees(png: bytes, agents: int, body: int = 60) -> Seen:
    """Check a screenshot: each of `agents` drawn in the scene (at least `body` pixels of its own colour: the face
    of its body toward the eye and its label; its plan's path is see-through and does not count; 0: do not check
    the scene), the SLO_t line in the latency plot, rows in the event log. `problems` says what is missing."""
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    seen = Seen({f"agent {i}": near(SCENE.of(image), agent_rgb(i)) for i in range(agents)},
                near(LATENCY.of(image), SLO_COLOUR), text_pixels(EVENTS.of(image)))
    if body:
        seen.problems += [f"{name} is not drawn in the scene ({count} pixels of its colour)"
                          for name, count in seen.agents.items() if count < body]
    if seen.slo_line < 30:
        seen.problems.append(f"no SLO_t line in the latency plot ({seen.slo_line} pixels of its colour)")
    if seen.event_text < 800:
        seen.problems.append(f"no rows in the event log ({seen.event_text} text pixels)")
    return seen


@dataclass
class Look:
    """One recording looked at in the browser: the timings and the screenshot."""

    convert_s: float        # bag -> .rrd
    first_frame_s: float    # from opening the page until the viewer's handle exists (its first frame drawn)
    loaded_s: float         # from opening the page until the whole recording is in the viewer
    last_step: int
    png: bytes


def look(run_folder: Path, step: int | None = None, screenshot: Path | None = None,
         timeout_s: float = 240.0) -> Look:
    """The run's bag as `brace-audit view` shows it, in Chromium, the time cursor on `step` (None: the middle of
    the run); the screenshot also goes to `screenshot`. BrowserMissing without a browser."""
    (bag,) = find_bags(run_folder)
    start = time.monotonic()
    view = bag_to_rrd(bag)
    convert_s = time.monotonic() - start
    store = f"Recording:{APPLICATION_ID}:{recording_name(bag)}"
    at = view.last_step // 2 if step is None else step
    with ViewerServer(free_port(), free_port(), files=[view.rrd]) as server, ViewerPage(server.url) as page:
        loaded = page.wait_loaded(store, "step", view.last_step, timeout_s)
        page.set_time(store, "step", at)
        png = page.screenshot(screenshot)
        return Look(convert_s, page.opened_s, page.opened_s + loaded, view.last_step, png)
