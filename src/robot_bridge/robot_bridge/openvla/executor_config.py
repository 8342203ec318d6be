"""Typed, validated parameters of the openvla_executor node, and the core objects they build (no ROS).

Tables are ROS string-array parameters of `name=value` entries (instruction_templates,
object_aliases, skill_conditions, locations); see config/openvla_executor.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass

from brace_common import names
from brace_common.config import ConfigError, autostart_param, check_agent_ids, check_fields, diagnostics_period_param, param

from .instructions import InstructionTemplates
from .step_monitor import MonitorConfig, parse_conditions, parse_locations
from .vla_action import GRIPPER_MODES, ArmScaling, GripperMapping

BACKENDS = ("server", "local")
ON_FAILURE = ("abandon", "continue")


@dataclass
class ExecutorConfig:
    """Parameters of openvla_executor."""

    agent_id: str = param("arm_0", "the agent whose plans this executor runs (Plan.agent_id); stamped on its outcomes")
    backend: str = param("server", "where actions come from: 'server' (an OpenVLA deploy server at server_url) or "
                         "'local' (the model at model_path, loaded at configure)")
    server_url: str = param("http://127.0.0.1:8000/act", "the deploy server's /act URL (backend 'server')")
    server_timeout_s: float = param(5.0, "total deadline of one /act request, connect to the last byte of the answer "
                                    "(s; not a per-read timeout): a request not answered whole by then is a VLA error",
                                    0.05, 120.0)
    model_path: str = param("", "local directory of an OpenVLA checkpoint (backend 'local'; never downloaded)")
    device: str = param("auto", "backend 'local': 'auto' (cuda:0 when available, else cpu), 'cpu' or 'cuda[:n]'")
    unnorm_key: str = param("bridge_orig", "dataset statistics that un-normalize the actions ('' = the model's only "
                            "ones)")
    image_topic: str = param("front_camera/color/image_raw", "camera image the VLA sees (sensor_msgs/Image rgb8 or "
                             "bgr8; relative names namespace)")
    image_size: int = param(224, "images are resized to this square before they are sent (OpenVLA's input size; 0 "
                            "= as received)", 0, 4096)
    control_period_s: float = param(0.2, "seconds between control ticks: each tick judges the step and, when no VLA "
                                    "call is in flight, asks for the next action", 0.02, 10.0)
    frame_id: str = param("base_link", "frame of the commanded deltas (EndEffectorDelta.header.frame_id)")
    ee_delta_topic: str = param(names.EE_DELTA_CMD, "where the commanded deltas go (brace_msgs/EndEffectorDelta): "
                                "the arm's ee_delta_cmd, or ee_delta_cmd_nav when the arm's collision monitor "
                                "(ee_monitor) stands between")
    gripper_joint: str = param("gripper", "the joint_states entry whose position is the gripper opening (m)")
    on_failure: str = param("abandon", "after a failed step: 'abandon' the rest of the plan (idle until the next "
                            "plan) or 'continue' with the next step")
    # -- instructions and success conditions
    instruction_templates: list[str] = param(
        ["pick=pick up the {object}", "place=put the {object} in the {target}", "push=push the {object} to the "
         "{target}", "move_to=move the gripper to the {target}"],
        "skill=instruction entries; {name} takes that parameter, {0}, {1} the parameters in order")
    object_aliases: list[str] = param([], "id=words entries: what the VLA reads for a parameter value (default: the id "
                                      "with underscores as spaces)")
    skill_conditions: list[str] = param(["pick=grasp", "place=place", "push=push", "move_to=reach"],
                                        "skill=condition entries (grasp, place, push, reach): how a step succeeds")
    locations: list[str] = param([], "name=x,y,z entries (m, in the end pose's frame): targets and objects of steps")
    object_parameter: str = param("object", "the step parameter that names the object")
    target_parameter: str = param("target", "the step parameter that names the target location")
    # -- action scaling
    translation_scale: float = param(1.0, "the VLA's delta xyz is multiplied by this (m per action unit)", 1e-6, 100.0)
    rotation_scale: float = param(1.0, "the VLA's delta rpy is multiplied by this (rad per action unit)", 1e-6, 100.0)
    max_translation_m: list[float] = param([0.02, 0.02, 0.02], "per-axis limit of one step's translation (m)")
    max_rotation_rad: list[float] = param([0.1, 0.1, 0.1], "per-axis limit of one step's rotation (rad)")
    anchor_actions: bool = param(True, "apply each step from the end pose measured when its VLA request was sent "
                                 "(what the VLA saw), not when the answer came: otherwise a step computed while the "
                                 "previous one was still under way repeats it (the tool then circles its target)")
    gripper_mode: str = param("threshold", "'threshold' (open or closed) or 'continuous' (interpolated opening)")
    gripper_open_value: float = param(1.0, "the action's gripper value of a fully open gripper (OpenVLA: 1)")
    gripper_closed_value: float = param(0.0, "the action's gripper value of a closed gripper (OpenVLA: 0; inverted "
                                        "datasets swap them)")
    gripper_threshold: float = param(0.5, "threshold mode: an openness at or above this commands open", 0.0, 1.0)
    gripper_open_m: float = param(0.07, "opening commanded for open (m; the PiPER's stroke is 0..0.07)", 0.0, 0.2)
    gripper_closed_m: float = param(0.0, "opening commanded for closed (m)", 0.0, 0.2)
    # -- step monitor
    min_object_width_m: float = param(0.005, "a settled closed gripper narrower than this holds nothing", 0.0, 0.2)
    max_object_width_m: float = param(0.065, "a settled closed gripper wider than this did not close", 0.0, 0.2)
    closed_command_m: float = param(0.01, "a commanded opening at or below this closes the gripper (m)", 0.0, 0.2)
    grasp_settle_s: float = param(0.5, "the opening must stay still this long after a close before it is judged (s)",
                                  0.0, 60.0)
    settle_tolerance_m: float = param(0.001, "an opening change below this is no motion (m)", 0.0, 0.05)
    hold_confirm_s: float = param(0.5, "pick: the grasp must hold this long (s)", 0.0, 60.0)
    release_margin_m: float = param(0.01, "place: the opening must grow this much past the held width (m)", 0.0, 0.2)
    position_tolerance_m: float = param(0.02, "push / reach: the end effector is at the target within this (m)", 0.0,
                                        1.0)
    place_tolerance_m: float = param(0.05, "place: the release must be this close to the target, horizontally (m)",
                                     0.0, 1.0)
    push_contact_m: float = param(0.03, "push: the end effector is on the object's path within this (m)", 0.0, 1.0)
    push_loss_m: float = param(0.06, "push: after contact, farther than this from the path loses contact (m)", 0.0,
                               1.0)
    step_timeout_s: float = param(60.0, "a step that has not succeeded by then fails (TIMEOUT)", 0.1, 3600.0)
    max_step_actions: int = param(300, "a step that has not succeeded after this many actions fails (TIMEOUT)", 1,
                                  1_000_000)
    max_vla_errors: int = param(3, "this many VLA errors in a row fail the step (EXECUTOR)", 1, 1000)
    stale_after_s: float = param(2.0, "a step fails (EXECUTOR) when the arm state or the image is older than this "
                                 "(s)", 0.1, 600.0)
    halt_on_verdict: bool = param(True, "halt the running step when the visual verifier's verdict (verdicts) for this "
                                  "agent is a violation: FAILURE_PREEMPTED, the arm holds, the rest of the plan is "
                                  "abandoned")
    halt_min_confidence: float = param(0.5, "a violation halts the step only with at least this confidence (the "
                                       "trigger monitor's preempt_min_confidence)", 0.0, 1.0)
    diagnostics_period_s: float = diagnostics_period_param()
    autostart: bool = autostart_param(False)

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        check_agent_ids("agent_id", self.agent_id)
        if self.backend not in BACKENDS:
            raise ConfigError("backend", f"'{self.backend}' is not one of {list(BACKENDS)}")
        if self.backend == "server" and not self.server_url.startswith(("http://", "https://")):
            raise ConfigError("server_url", f"'{self.server_url}' is not an http(s) URL")
        if self.backend == "local" and not self.model_path:
            raise ConfigError("model_path", "the local backend needs the directory of a checkpoint")
        if self.device != "auto" and self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigError("device", f"'{self.device}' is not auto, cpu or cuda[:n]")
        if not self.ee_delta_topic.strip("/"):
            raise ConfigError("ee_delta_topic", "must not be empty")
        if not self.image_topic.strip():
            raise ConfigError("image_topic", "must not be empty")
        if not self.gripper_joint:
            raise ConfigError("gripper_joint", "must not be empty")
        if self.on_failure not in ON_FAILURE:
            raise ConfigError("on_failure", f"'{self.on_failure}' is not one of {list(ON_FAILURE)}")
        if self.gripper_mode not in GRIPPER_MODES:
            raise ConfigError("gripper_mode", f"'{self.gripper_mode}' is not one of {list(GRIPPER_MODES)}")
        templates = self.templates()
        monitor = self.monitor_config()
        missing = sorted(set(monitor.conditions) - templates.skills)
        if missing:
            raise ConfigError("instruction_templates", f"skills {missing} have a condition but no template")
        self.scaling()
        self.gripper()

    def templates(self) -> InstructionTemplates:
        """The instruction table (ConfigError naming the parameter)."""
        try:
            return InstructionTemplates.from_entries(self.instruction_templates, self.object_aliases)
        except ValueError as exc:
            raise ConfigError("object_aliases" if "object_aliases" in str(exc) else "instruction_templates",
                              str(exc)) from None

    def monitor_config(self) -> MonitorConfig:
        """The step monitor's configuration (ConfigError naming the parameter)."""
        try:
            conditions = parse_conditions(self.skill_conditions)
        except ValueError as exc:
            raise ConfigError("skill_conditions", str(exc)) from None
        try:
            locations = parse_locations(self.locations)
        except ValueError as exc:
            raise ConfigError("locations", str(exc)) from None
        fields = {name: getattr(self, name) for name in MonitorConfig.__dataclass_fields__
                  if name not in ("conditions", "locations")}
        cfg = MonitorConfig(conditions=conditions, locations=locations, **fields)
        try:
            cfg.validate()
        except ValueError as exc:
            name = str(exc).split(":", 1)[0].split(" ", 1)[0]
            raise ConfigError("skill_conditions" if name == "conditions" else name, str(exc)) from None
        return cfg

    def scaling(self) -> ArmScaling:
        """Scale factors and per-axis limits (ConfigError naming the parameter)."""
        scaling = ArmScaling(self.translation_scale, self.rotation_scale, tuple(self.max_translation_m),
                             tuple(self.max_rotation_rad))
        try:
            scaling.validate()
        except ValueError as exc:
            raise ConfigError(str(exc).split(":", 1)[0], str(exc)) from None
        return scaling

    def gripper(self) -> GripperMapping:
        """The gripper convention (ConfigError naming the parameter)."""
        mapping = GripperMapping(self.gripper_mode, self.gripper_open_value, self.gripper_closed_value,
                                 self.gripper_threshold, self.gripper_open_m, self.gripper_closed_m)
        try:
            mapping.validate()
        except ValueError as exc:
            raise ConfigError("gripper_" + str(exc).split(":", 1)[0], str(exc)) from None
        return mapping
