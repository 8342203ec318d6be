"""Typed, validated parameters of the visual_verifier node, and the perceiver they build (no ROS).

Tables are ROS string-array parameters of `name=value` entries: object_colors
(`apple=190,30,35`: what each object looks like, RGB) and regions
(`bowl=0.25,0.12,0.05`: x, y and radius in base_link, m). Backend `geometric`
finds the objects by those colours in the calibrated camera; backend `vlm` asks
a vision-language model on an OpenAI-compatible server (the `vlm_*`
parameters) and gives it the object names, their colours and the region names.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from brace_common.config import (
    ConfigError,
    check_agent_ids,
    check_base_url_param,
    check_fields,
    diagnostics_period_param,
    param,
)

from ..openvla.step_monitor import parse_locations
from ..orbbec.calibration import CameraModel
from ..orbbec.camera_config import NAME_PATTERN
from ..pickfruit.scene_render import OBJECT_COLORS
from ..pickfruit.twin_camera import TABLE_TOP_M
from .scene_diff import BACKEND_GEOMETRIC, Catalogue, GeometricPerceiver, GeometricTuning, Perceiver, Region
from .vlm_perceiver import BACKEND_VLM, DEFAULT_BASE_URL, VLMPerceiver, VLMSettings

BACKENDS = (BACKEND_GEOMETRIC, BACKEND_VLM)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What `vlm_api_key_env` may be: an environment variable's name."""
MIN_COLOR_SPREAD = 40
"""An object colour whose largest and smallest channel differ by less is grey: the perceiver cannot find it by colour."""


def _entries(name: str, values: list[str]) -> dict[str, tuple[float, float, float]]:
    """`key=a,b,c` entries of parameter `name` (ConfigError naming it)."""
    try:
        return parse_locations(values, name)
    except ValueError as exc:
        raise ConfigError(name, str(exc)) from None


@dataclass
class VerifierConfig:
    """Parameters of visual_verifier."""

    agent_id: str = param("arm_0", "the agent whose steps this verifier watches (Plan / ExecutionOutcome agent_id); "
                          "stamped on its verdicts")
    backend: str = param("geometric", "the perceiver: 'geometric' (colour and depth in the calibrated camera, CPU) "
                         "or 'vlm' (a vision-language model on an OpenAI-compatible server: the vlm_* parameters)")
    camera_name: str = param("front_camera", "camera whose <camera_name>/color/image_raw and depth/image_raw are "
                             "compared (OrbbecSDK_ROS2's layout: the twin and a real Orbbec camera alike)")
    camera_calibration: str = param("package://robot_bridge/config/twin_front_camera.yaml",
                                    "ROS camera calibration YAML of that camera with its pose_in_base_link "
                                    "('package://' allowed)")
    object_colors: list[str] = param([f"{k}={','.join(map(str, v))}" for k, v in OBJECT_COLORS.items()],
                                     "object=r,g,b entries: the objects the perceiver looks for and their colour")
    regions: list[str] = param(["bowl=0.25,0.12,0.05"], "name=x,y,radius entries (base_link, m): places an object "
                               "can be in (the bowl)")
    table_height_m: float = param(TABLE_TOP_M, "height of the table top in base_link (m)", -2.0, 2.0)
    sample_period_s: float = param(0.2, "frames are compared at most this often (s; the executor's control period)",
                                   0.02, 10.0)
    confirm_frames: int = param(2, "frames in a row that must show a contradiction before a violation is published",
                                1, 50)
    chroma_tolerance: float = param(0.05, "an object's pixels are within this of its colour's chromaticity", 0.005, 0.3)
    min_pixels: int = param(10, "fewer pixels of an object's colour than this: not seen", 1, 100000)
    held_above_m: float = param(0.06, "an object this far above the table top is in the gripper (m)", 0.01, 1.0)
    move_distance_m: float = param(0.025, "an object on the table that moved this far moved (m)", 0.001, 1.0)
    occlusion_margin_m: float = param(0.015, "an unseen object whose spot reads this much nearer than it was is "
                                      "hidden, not gone (m)", 0.001, 1.0)
    max_frame_skew_s: float = param(0.05, "colour and depth frames further apart than this (stamps) are not paired",
                                    0.0, 1.0)
    stale_after_s: float = param(1.0, "no frame pair for this long: diagnostics WARN (s)", 0.05, 60.0)
    vlm_base_url: str = param(DEFAULT_BASE_URL, "backend 'vlm': the OpenAI-compatible server's base URL "
                              "(POST <vlm_base_url>/chat/completions; e.g. vLLM serving Qwen2.5-VL)")
    vlm_model: str = param("Qwen/Qwen2.5-VL-7B-Instruct", "backend 'vlm': the model name each request carries (the "
                           "name the server serves it under)")
    vlm_api_key_env: str = param("", "backend 'vlm': environment variable holding the API key, sent as "
                                 "'Authorization: Bearer <key>'; '' = no Authorization header")
    vlm_timeout_s: float = param(10.0, "backend 'vlm': a request's whole deadline, connect to last byte; a later "
                                 "answer is a perceiver error (s)", 0.1, 600.0)
    vlm_max_tokens: int = param(512, "backend 'vlm': the answer's token limit (max_tokens)", 16, 8192)
    vlm_json_mode: bool = param(True, "backend 'vlm': ask for a JSON object (response_format json_object); false "
                                "for a server that does not take response_format")
    dry_run: bool = param(False, "compare and count, but publish no verdict (a variant without the verifier keeps "
                          "the same graph)")
    diagnostics_period_s: float = diagnostics_period_param()

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        check_agent_ids("agent_id", self.agent_id)
        if not self.camera_calibration:
            raise ConfigError("camera_calibration", "the camera's calibration file is needed (its intrinsics and "
                              "pose_in_base_link; docs/robot.md)")
        if self.backend not in BACKENDS:
            raise ConfigError("backend", f"'{self.backend}' is not one of {', '.join(BACKENDS)}")
        if not NAME_PATTERN.fullmatch(self.camera_name):
            raise ConfigError("camera_name", f"'{self.camera_name}' is not a relative ROS name")
        colors = self.colors()
        if not colors:
            raise ConfigError("object_colors", "at least one object must be catalogued")
        for name, rgb in colors.items():
            if not all(0 <= c <= 255 for c in rgb) or sum(rgb) < 60:
                raise ConfigError("object_colors", f"{name}: {rgb} must be 0..255 each and not near black")
            if self.backend == BACKEND_GEOMETRIC and max(rgb) - min(rgb) < MIN_COLOR_SPREAD:
                raise ConfigError("object_colors", f"{name}: {rgb} is too grey to tell from the table and the gripper "
                                  f"(its channels must spread at least {MIN_COLOR_SPREAD})")
        for region in self.region_list():
            if region.radius <= 0:
                raise ConfigError("regions", f"{region.name}: the radius must be positive")
        if self.backend == BACKEND_VLM:
            self.validate_vlm()

    def validate_vlm(self) -> None:
        """ConfigError naming the first invalid vlm_* parameter."""
        check_base_url_param("vlm_base_url", self.vlm_base_url)
        if not self.vlm_model.strip():
            raise ConfigError("vlm_model", "the served model's name is needed (every request carries it)")
        if self.vlm_api_key_env and not ENV_NAME.fullmatch(self.vlm_api_key_env):
            raise ConfigError("vlm_api_key_env", f"'{self.vlm_api_key_env}' is not an environment variable name")

    def api_key(self) -> str:
        """The API key from the environment variable `vlm_api_key_env` ('' when none is named); ConfigError naming
        the parameter when the variable is unset or empty."""
        if not self.vlm_api_key_env:
            return ""
        key = os.environ.get(self.vlm_api_key_env, "")
        if not key:
            raise ConfigError("vlm_api_key_env", f"the environment variable {self.vlm_api_key_env} is not set")
        return key

    def colors(self) -> dict[str, tuple[int, int, int]]:
        """object_colors as a mapping."""
        return {k: tuple(int(round(c)) for c in v) for k, v in _entries("object_colors", self.object_colors).items()}

    def region_list(self) -> tuple[Region, ...]:
        """regions as Regions."""
        return tuple(Region(k, *v) for k, v in _entries("regions", self.regions).items())

    def perceiver(self, camera: CameraModel) -> Perceiver:
        """The perceiver of these parameters (`backend`) for `camera`."""
        self.validate()
        catalogue = Catalogue(self.colors(), self.table_height_m, self.region_list())
        if self.backend == BACKEND_VLM:
            return VLMPerceiver(catalogue, VLMSettings(self.vlm_base_url, self.vlm_model, self.vlm_timeout_s,
                                                       self.vlm_max_tokens, self.api_key(), self.vlm_json_mode))
        return GeometricPerceiver(camera, catalogue, GeometricTuning(self.chroma_tolerance, self.min_pixels,
                                                                     self.held_above_m, self.move_distance_m,
                                                                     self.occlusion_margin_m))
