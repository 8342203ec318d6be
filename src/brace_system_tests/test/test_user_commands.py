"""Every command a user is given, checked against the code that parses it: a command that cannot start fails here.

Where the commands are: README.md and docs/**/*.md (fenced shell lines and inline code spans), the launch files'
docstrings, the run configurations' comments, the Makefile's recipes, and the docker files (the compose services'
`command` and health checks with `${VAR:-default}` expanded, the Dockerfiles' CMD, ENTRYPOINT and HEALTHCHECK, the
commands of entrypoint.sh and healthcheck.sh with the robot service's environment). Shell continuation lines are
joined, `$(ros2 pkg prefix P)` is P's install prefix, a glob is expanded from the workspace root.

What a command is checked against, by its program:
- `brace-run` / `python -m brace_bringup.runner`: brace-run's own checks (runner.main up to where it would start the
  run: the run configuration, `--variants`, one variant for a stack without a world, `--set NODE.PARAM=VALUE` on a
  node of the stack), then each `--set` names a parameter the node declares and gives it a valid value;
- `ros2 launch brace_bringup F`: F is an installed launch file, each `name:=value` one it declares, and the run
  plan it would start (run_plan.plan_for_launch) builds for those arguments (run:=, variant:=, num_agents:= ...);
- `ros2 run P E`: E is an installed console script of P; `--ros-args` parameters are ones the node declares and a
  `--params-file` exists; the arguments before `--ros-args` parse with the program's own parser;
- our other programs (`brace-audit`, `robot_preflight`, `python -m <our module>`, `python bench/<script>.py`): their
  argparse parser accepts the arguments (stopped right after it parsed: no benchmark, bag or check runs);
- `make T`: T is a target of the Makefile; an image path (/opt/brace/...) is a file of the workspace, executable.
An argument naming a workspace file (src/..., docs/..., a glob) must name one that exists. A synopsis (a
`<placeholder>`, `[a | b]`, `...`, an upper-case metavariable: `--episodes N`) is checked for its subcommand and
flags only; an inline span may name a program or subcommand without its required arguments. Third-party servers
(vLLM) are skipped, named. The robot image's default command starts the variant piper_real.launch.py starts.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import glob
import importlib
import importlib.metadata
import importlib.util
import io
import os
import re
import runpy
import shlex
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import yaml
from ament_index_python.packages import PackageNotFoundError, get_package_prefix

from brace_bringup import runner
from brace_bringup.graph import STACKS
from brace_bringup.run_config import RunConfig, share
from brace_bringup.run_plan import AIRSIM_LAUNCH_ARGUMENTS, LAUNCH_ARGUMENTS, plan_for_launch
from brace_common.config import ConfigError, field_default, from_mapping, load_ros_parameters
from brace_common.testing import installed_executable

WORKSPACE = Path(__file__).resolve().parents[3]
DOCKER = WORKSPACE / "docker"
BENCH = WORKSPACE / "bench"
PACKAGES = sorted(p.name for p in (WORKSPACE / "src").iterdir() if (p / "package.xml").is_file())
ROS_PARAMETERS = {"use_sim_time"}  # declared by rclpy itself
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh"}
IMAGE_PATHS = {"/opt/brace/": WORKSPACE, "/opt/openvla/": DOCKER / "openvla"}  # where the images copy the files
THIRD_PARTY_IMAGES = {"vllm/vllm-openai": "vLLM's OpenAI-compatible server: its flags are vLLM's, not this project's"}
SEPARATORS = {"&&", "||", ";", "|", "&"}


# ------------------------------------------------------------------ finding the commands


@dataclass(frozen=True)
class Command:
    """One command line as a user is given it."""

    where: str                # file:line
    text: str                 # continuation lines joined
    inline: bool = False      # an inline code span: may name a program or subcommand without its required arguments
    environment: tuple[tuple[str, str], ...] = ()  # variables it is expanded with (a docker service's)


def relative(path: Path) -> str:
    return str(path.relative_to(WORKSPACE))


def joined_lines(lines: list[str], first: int) -> list[tuple[int, str]]:
    """(line number, line) with shell continuation lines (a trailing backslash) joined."""
    out: list[tuple[int, str]] = []
    pending: Optional[tuple[int, str]] = None
    for number, line in enumerate(lines, first):
        if pending is not None:
            line = pending[1] + " " + line.strip()
            number = pending[0]
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        pending = None
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def inline_spans(path: Path, text: str, first: int = 1) -> list[Command]:
    """Every inline code span of `text` (one span may run over a line break, not over a paragraph)."""
    return [Command(f"{relative(path)}:{first + text.count(chr(10), 0, m.start())}", " ".join(m[1].split()), True)
            for m in re.finditer(r"(?<!`)`([^`]+?)`(?!`)", text) if "\n\n" not in m[1]]


def markdown_commands(path: Path) -> list[Command]:
    """Fenced shell lines (```bash, ```sh or a bare fence) and inline code spans of a Markdown file."""
    lines = path.read_text().splitlines()
    found: list[Command] = []
    prose = list(lines)
    fence: Optional[tuple[int, str]] = None
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            if fence is None:
                fence = (index, line.strip()[3:].strip().lower())
            else:
                if fence[1] in SHELL_FENCES:
                    block = [re.sub(r"^\$ ", "", raw.strip()) for raw in lines[fence[0] + 1:index]]
                    found += [Command(f"{relative(path)}:{number}", text)
                              for number, text in joined_lines(block, fence[0] + 2)]
                fence = None
            prose[index] = ""
        elif fence is not None:
            prose[index] = ""
    return found + inline_spans(path, "\n".join(prose))


def comment_commands(path: Path) -> list[Command]:
    """The commands in a file's comments: inline code spans, and indented lines (`#   brace-run ...`)."""
    lines = path.read_text().splitlines()
    comments = [line.split("#", 1)[1] if "#" in line else "" for line in lines]
    found = [Command(f"{relative(path)}:{number}", text.strip())
             for number, text in joined_lines(comments, 1) if text.startswith("   ")]
    return found + inline_spans(path, "\n".join(comments))


def docstring_commands(path: Path) -> list[Command]:
    """A launch file's docstring: indented lines are commands; inline code spans in the rest."""
    tree = ast.parse(path.read_text())
    docstring = ast.get_docstring(tree, clean=False) or ""
    first = tree.body[0].lineno if tree.body else 1
    lines = docstring.splitlines()
    found = [Command(f"{relative(path)}:{number}", text.strip())
             for number, text in joined_lines(lines, first) if text.startswith("    ") and text.strip()]
    return found + inline_spans(path, "\n".join("" if line.startswith("    ") else line for line in lines), first)


def makefile_commands() -> list[Command]:
    """The Makefile's recipe lines, as `make` runs them ($(ENV) sourced, $(MAKE) is make)."""
    path = WORKSPACE / "Makefile"
    found = []
    for number, line in joined_lines(path.read_text().splitlines(), 1):
        if line.startswith("\t"):
            text = re.sub(r"^[@-]+", "", line.strip()).replace("$(ENV) && ", "").replace("$(MAKE)", "make")
            found.append(Command(f"{relative(path)}:{number}", text))
    return found


def line_of(path: Path, needle: str, after: str = "") -> int:
    """The first line of `path` holding `needle` after the first one holding `after` (1 when none does)."""
    lines = path.read_text().splitlines()
    start = next((n for n, line in enumerate(lines) if after in line), 0)
    return next((n for n, line in enumerate(lines[start:], start + 1) if needle in line), 1)


def compose_services(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["services"]


def service_environment(service: dict) -> tuple[tuple[str, str], ...]:
    """A compose service's environment with its variables' defaults (what the container sees when none is set)."""
    values = service.get("environment") or {}
    return tuple((k, expand(str(v), {})) for k, v in values.items())


def robot_environment() -> tuple[tuple[str, str], ...]:
    """The robot container's environment: the image's ENV, then the robot service's defaults."""
    image = dict(item.partition("=")[::2] for name, args in dockerfile_steps(DOCKER / "Dockerfile") if name == "ENV"
                 for item in shlex.split(args))
    return tuple({**image, **dict(service_environment(compose_services(DOCKER / "compose.yaml")["robot"]))}.items())


def dockerfile_steps(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                           if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip()]


def exec_form(arguments: str) -> str:
    """A Dockerfile CMD / ENTRYPOINT / HEALTHCHECK CMD as one command line (exec form or shell form)."""
    arguments = re.sub(r"^(--\S+\s+)*CMD\s+", "", arguments.strip())
    return shlex.join(yaml.safe_load(arguments)) if arguments.startswith("[") else arguments


COMPOSE_FILES = (DOCKER / "compose.yaml", DOCKER / "planner.compose.yaml")
DOCKERFILES = (DOCKER / "Dockerfile", DOCKER / "openvla" / "Dockerfile")


def third_party_image(service: dict) -> str:
    """Why a compose service's commands are not this project's to check ('' when they are)."""
    return THIRD_PARTY_IMAGES.get(str(service.get("image", "")).split(":")[0], "")


def skipped_services() -> list[str]:
    """The compose services whose commands are another project's (named with the reason)."""
    return [f"{relative(path)} service {name} ({service['image']}): {third_party_image(service)}"
            for path in COMPOSE_FILES for name, service in compose_services(path).items() if third_party_image(service)]


def docker_commands() -> list[Command]:
    """The compose services' commands and health checks, the Dockerfiles' CMD / ENTRYPOINT / HEALTHCHECK, and the
    commands of the robot image's entry point and health check (with the robot container's environment); the
    commands in the files' comments."""
    found: list[Command] = []
    for path in COMPOSE_FILES:
        found += comment_commands(path)
        for name, service in compose_services(path).items():
            if third_party_image(service):
                continue
            environment = service_environment(service)
            if name == "robot":
                environment = robot_environment()
            command = service.get("command")
            if command is not None:
                text = command if isinstance(command, str) else shlex.join(command)
                found.append(Command(f"{relative(path)}:{line_of(path, 'command:', f'  {name}:')}", text,
                                     environment=environment))
            test = (service.get("healthcheck") or {}).get("test")
            if test:
                found.append(Command(f"{relative(path)}:{line_of(path, 'test:', f'  {name}:')}", shlex.join(test[1:]),
                                     environment=environment))
    for path in DOCKERFILES:
        found += comment_commands(path)
        for name, arguments in dockerfile_steps(path):
            if name in ("CMD", "ENTRYPOINT", "HEALTHCHECK"):
                line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(name + " "))
                found.append(Command(f"{relative(path)}:{line}", exec_form(arguments)))
    for path in (DOCKER / "entrypoint.sh", DOCKER / "healthcheck.sh"):
        lines = [line if not line.lstrip().startswith("#") else "" for line in path.read_text().splitlines()]
        found += [Command(f"{relative(path)}:{number}", text.strip(), environment=robot_environment())
                  for number, text in joined_lines(lines, 1) if text.strip()]
        found += [c for c in comment_commands(path) if c.inline]
    return found


def all_commands() -> dict[str, list[Command]]:
    """Every candidate command line, by where it was found."""
    docs = [WORKSPACE / "README.md", *sorted((WORKSPACE / "docs").rglob("*.md"))]
    return {
        "docs": [c for path in docs for c in markdown_commands(path)],
        "docker": docker_commands(),
        "launch files": [c for path in sorted((WORKSPACE / "src/brace_bringup/launch").glob("*.launch.py"))
                         for c in docstring_commands(path)],
        "run configurations": [c for path in sorted((WORKSPACE / "src/brace_bringup/runs").glob("*.yaml"))
                               for c in comment_commands(path)],
        "Makefile": makefile_commands(),
    }


# ------------------------------------------------------------------ reading a command line


def expand(text: str, environment: dict[str, str]) -> str:
    """Shell / compose variables: `${V:-d}`, `${V-d}` (d when unset), `${V:?m}` (a placeholder), `$V`, `${V}`."""

    def one(match: re.Match) -> str:
        name, op, default = match["name"] or match["bare"], match["op"], match["default"] or ""
        if name in environment and not (op == ":-" and environment[name] == ""):
            return environment[name]
        if op in (":-", "-"):
            return default
        return f"<{name}>"

    return re.sub(r"\$\{(?P<name>\w+)(?:(?P<op>:-|-|:\?|\?)(?P<default>[^}]*))?\}|\$(?P<bare>[A-Za-z_]\w*)", one, text)


def package_prefixes(text: str) -> str:
    """`$(ros2 pkg prefix P)` as P's install prefix."""

    def prefix(match: re.Match) -> str:
        try:
            return get_package_prefix(match[1])
        except PackageNotFoundError:
            return match[0]

    return re.sub(r"\$\(ros2 pkg prefix (\w+)\)", prefix, text)


SYNOPSIS = re.compile(r"<[A-Za-z][^<>]*>|\.\.\.|…|\[[^\]]*\|[^\]]*\]|--[\w-]+[ =][A-Z][A-Z_0-9]*(?=[\s\]]|$)")


@dataclass(frozen=True)
class Invocation:
    """One program and its arguments, found in a command line."""

    command: Command
    tokens: tuple[str, ...]
    synopsis: bool            # placeholders: check the subcommand and flags only

    def __str__(self) -> str:
        return f"{self.command.where}: {shlex.join(self.tokens)}"


def segments(command: Command) -> list[tuple[list[str], bool]]:
    """The simple commands of a line: (tokens, synopsis), split at && || ; | and cut at a redirection."""
    text = expand(package_prefixes(command.text), dict(command.environment))
    text = re.sub(r"(^|\s)#.*$", "", text)  # a shell comment
    synopsis = bool(SYNOPSIS.search(text))
    if synopsis:
        text = re.sub(r"[][()]", " ", re.sub(r"<[A-Za-z][^<>]*>", "PLACEHOLDER", text))
        try:
            return [(shlex.split(text, comments=True), True)]
        except ValueError:
            return []
    text = re.sub(r"\[(\s*-[^\]|]*)\]", r"\1", text)  # optional flags: [--closed-loop demo one_thread k8]
    text = re.sub(r"(?<=\s)\d+(?=[<>])", "", text)  # 2>/dev/null: a redirection of stderr, not an argument
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    out: list[tuple[list[str], bool]] = [([], False)]
    cut = False
    for token in tokens:
        if token in SEPARATORS:
            out.append(([], False))
            cut = False
        elif set(token) <= set("<>&"):
            cut = True  # a redirection: the rest of this command is its target
        elif not cut:
            out[-1][0].append(token)
    return [s for s in out if s[0]]


def console_scripts() -> dict[str, tuple[str, str]]:
    """Every console script of this workspace's packages: name -> (package, "module:function")."""
    found = {}
    for package in PACKAGES:
        try:
            distribution = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        for entry in distribution.entry_points:
            if entry.group == "console_scripts":
                found[entry.name] = (package, entry.value)
    return found


SCRIPTS = console_scripts()


def parses_arguments(module: str) -> bool:
    """Whether a module builds an argparse parser (a program whose arguments can be checked without running it)."""
    spec = importlib.util.find_spec(module)
    return bool(spec and spec.origin and "ArgumentParser(" in Path(spec.origin).read_text())


def cli_scripts() -> set[str]:
    """The console scripts that are command-line programs (an argparse parser), not nodes."""
    return {name for name, (_, value) in SCRIPTS.items() if parses_arguments(value.split(":")[0])}


CLIS = cli_scripts()


def invocations(command: Command) -> list[Invocation]:
    """The invocations of this project's programs in a command line (env assignments, exec and time dropped; an
    assignment's value that is itself a command, BRACE_ROBOT_COMMAND="brace-run ...", is one too)."""
    found = []
    for tokens, synopsis in segments(command):
        while tokens and (re.match(r"^[A-Za-z_]\w*=", tokens[0]) or tokens[0] in ("exec", "time", "sudo")):
            value = tokens.pop(0).partition("=")[2]
            if value.split() and program(value.split()):
                found += invocations(Command(command.where, value, command.inline, command.environment))
        if tokens and program(tokens) and not (command.inline and len(tokens) == 1):  # a name, not a command
            found.append(Invocation(command, tuple(tokens), synopsis))
    return found


def program(tokens: list[str]) -> Optional[str]:
    """The kind of program `tokens` starts (None: not one of this project's)."""
    first, rest = tokens[0], tokens[1:]
    if first == "brace-run":
        return "brace-run"
    if first in ("python", "python3") and rest[:1] == ["-m"] and len(rest) > 1:
        if rest[1] == "brace_bringup.runner":
            return "brace-run"
        return "module" if rest[1].split(".")[0] in PACKAGES else None
    if first in ("python", "python3") and rest[:1] == ["-c"] and len(rest) > 1:
        return "import" if re.fullmatch(r"import [\w., ]+", rest[1]) else None
    if first in ("python", "python3") and rest and rest[0].startswith("bench/") and rest[0].endswith(".py"):
        return "bench"
    if first in ("python", "python3") and rest and rest[0].startswith(tuple(IMAGE_PATHS)):
        return "image script"
    if first == "ros2" and rest[:1] == ["launch"] and len(rest) > 1 and \
            (rest[1] == "brace_bringup" or rest[1].endswith(".launch.py")):
        return "launch"
    if first == "ros2" and rest[:1] == ["run"] and len(rest) > 1 and rest[1] in PACKAGES:
        return "run"
    if first == "make":
        return "make"
    if first in CLIS:
        return "script"
    if first.startswith(tuple(IMAGE_PATHS)) or first == "/usr/bin/tini":
        return "image path"
    return None


# ------------------------------------------------------------------ checking an invocation


class Parsed(BaseException):
    """Raised where a program's argparse parser has parsed (or, with `before`, is about to parse) its arguments."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


@contextlib.contextmanager
def stop_at_parse(before: bool):
    """Stop the first top-level parse_args / parse_known_args of any parser (subparsers parse through)."""
    original_args, original_known = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    depth = [0]

    def wrap(original):
        def parse(self, args=None, namespace=None):
            if depth[0]:
                return original(self, args, namespace)
            if before:
                raise Parsed(self)
            depth[0] += 1
            try:
                original(self, args, namespace)
            finally:
                depth[0] -= 1
            raise Parsed(self)
        return parse

    argparse.ArgumentParser.parse_args = wrap(original_args)
    argparse.ArgumentParser.parse_known_args = wrap(original_known)
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = original_args, original_known


@contextlib.contextmanager
def argv(arguments: list[str]):
    saved = sys.argv
    sys.argv = list(arguments)
    try:
        yield
    finally:
        sys.argv = saved


def unknown_flags(parser: argparse.ArgumentParser, tokens: list[str]) -> Optional[str]:
    """A synopsis: its subcommand is one of the parser's and each flag one it (or the subcommand) takes."""
    options = set(parser._option_string_actions)
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subcommands:
        positional = [t for t in tokens if not t.startswith("-") and t != "PLACEHOLDER"]
        if not positional or positional[0] not in subcommands[0].choices:
            return f"no subcommand of {sorted(subcommands[0].choices)}"
        options |= set(subcommands[0].choices[positional[0]]._option_string_actions)
    bad = [t for t in tokens if t.startswith("-") and not re.fullmatch(r"-[\d.]+", t) and
           t.split("=")[0] not in options]
    return f"unknown flags {bad}" if bad else None


def check_program(start: Callable[[], object], arguments: list[str], invocation: Invocation) -> Optional[str]:
    """Run `start` (the program's entry, with sys.argv = arguments) until its parser has parsed: the error argparse
    gives (None when it accepts them). A synopsis: its subcommand and flags only."""
    err = io.StringIO()
    with argv(arguments), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
            stop_at_parse(before=invocation.synopsis):
        try:
            start()
        except Parsed as parsed:
            return unknown_flags(parsed.parser, arguments[1:]) if invocation.synopsis else None
        except SystemExit as exc:
            message = err.getvalue().strip().splitlines()
            if exc.code in (0, None):
                return None
            if invocation.command.inline and message and "the following arguments are required" in message[-1]:
                return None  # an inline span naming the program (or subcommand) without its arguments
            return f"exit {exc.code}: {message[-1] if message else ''}"
    return "its argument parser was never reached"


def entry_point(value: str) -> Callable[[], object]:
    module, _, function = value.partition(":")
    return lambda: getattr(importlib.import_module(module), function)()


def check_module(module: str, arguments: list[str], invocation: Invocation) -> Optional[str]:
    if importlib.util.find_spec(module) is None:
        return f"no module {module}"
    if not parses_arguments(module):
        return f"{module} has no argument parser to check {arguments}" if arguments else None
    with warnings.catch_warnings():  # the module is imported already: runpy says so, and runs it as __main__ anyway
        warnings.simplefilter("ignore", RuntimeWarning)
        return check_program(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True),
                             [module, *arguments], invocation)


def check_bench(script: str, arguments: list[str], invocation: Invocation) -> Optional[str]:
    path = WORKSPACE / script
    if "PLACEHOLDER" in script:
        return None  # python bench/<script>.py: any of them
    if not path.is_file():
        return f"no {script}"
    if "ArgumentParser(" not in path.read_text():
        return f"{script} has no argument parser to check {arguments}" if arguments else None
    before = set(sys.modules)
    sys.path.insert(0, str(BENCH))
    try:
        return check_program(lambda: runpy.run_path(str(path), run_name="__main__"), [str(path), *arguments],
                             invocation)
    finally:
        sys.path.remove(str(BENCH))
        for name in set(sys.modules) - before:  # bench's helpers (report, ...) are not packages of the workspace
            if str(BENCH) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]


class WouldRun(BaseException):
    """Raised where brace-run would start its run: every check of its own has passed."""

    def __init__(self, cfg: RunConfig, variants: list[str], extra: dict[str, dict]) -> None:
        super().__init__()
        self.cfg, self.variants, self.extra = cfg, variants, extra


def node_parameters(package: str, executable: str) -> tuple[set[str], list[type]]:
    """The parameters an installed node declares, read from its module (its config dataclasses passed to
    declare_parameters / declare_config or to a base's `super().__init__(name, Config, ...)`, and names given to
    declare_parameter), and those dataclasses."""
    module = importlib.import_module(SCRIPTS[executable][1].split(":")[0])  # callers: a console script of package
    tree = ast.parse(Path(module.__file__).read_text())
    names, classes = set(ROS_PARAMETERS), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "declare_parameters", "declare_config", "__init__") and len(node.args) > 1 and \
                isinstance(node.args[1], ast.Name) and dataclasses.is_dataclass(getattr(module, node.args[1].id, None)):
            cls = getattr(module, node.args[1].id)
            classes.append(cls)
            names |= {f.name for f in dataclasses.fields(cls)}
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and \
                isinstance(node.iter.func, ast.Attribute) and isinstance(node.iter.func.value, ast.Name) and \
                any(getattr(c.func, "attr", "") == "declare_parameter" for c in ast.walk(node) if
                    isinstance(c, ast.Call)):
            names |= set(getattr(module, node.iter.func.value.id))  # for name, ... in TABLE.items(): declare
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "declare_parameter" and node.args and \
                isinstance(node.args[0], ast.Constant):
            names.add(node.args[0].value)
    return names, classes


def check_node_values(package: str, executable: str, node: str, values: dict,
                      merged: Optional[dict] = None) -> Optional[str]:
    """The parameters `values` sets are ones the node declares, of their types, and, with the rest of the node's
    parameters as a run gives them (`merged`), its config dataclasses accept them. Without `merged` (a `ros2 run`
    on the user's machine: its files and devices are not here) only the names and types are checked."""
    declared, classes = node_parameters(package, executable)
    unknown = sorted(set(values) - declared)
    if unknown:
        return f"{node} ({package}/{executable}) declares no parameter {unknown}"
    for cls in classes:
        for f in dataclasses.fields(cls):
            default, value = field_default(f), values.get(f.name)
            if f.name in values and type(default) is not type(value) and not (
                    isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool)):
                return f"{node}: parameter '{f.name}' is a {type(default).__name__}, not {value!r}"
    if merged is None:
        return None
    merged = {**merged, **values}
    for cls in classes:
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            from_mapping(cls, {k: v for k, v in merged.items() if k in known})
        except (ConfigError, TypeError, ValueError) as exc:
            return f"{node}: {exc}"
    return None


def check_brace_run(arguments: list[str], invocation: Invocation) -> Optional[str]:
    """brace-run's own checks (runner.main, stopped where it would run), then each --set's parameter and value."""
    if invocation.synopsis:
        return check_program(runner.main, ["brace-run", *arguments], invocation)

    def would_run(cfg, variants, output, extra, *args, **kwargs):
        raise WouldRun(cfg, variants, extra)

    err = io.StringIO()
    saved = runner.run
    runner.run = would_run
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = runner.main(arguments)
    except WouldRun as run:
        for node, values in run.extra.items():
            if not values:
                continue
            spec = run.cfg.stack.node(node)
            for variant in run.variants:  # the node's parameters as the run gives them, the --set ones last
                error = check_node_values(spec.package, spec.executable, node, values,
                                          run.cfg.parameters(variant, run.extra)[node])
                if error:
                    return f"--set {error}"
        return None
    except SystemExit as exc:
        message = err.getvalue().strip().splitlines()
        if invocation.command.inline and exc.code == 2 and message and \
                "the following arguments are required" in message[-1]:
            return None
        return f"exit {exc.code}: {message[-1] if message else ''}"
    finally:
        runner.run = saved
    return f"exit {code}: {err.getvalue().strip()}"


def launch_file_defaults(path: Path) -> dict[str, str]:
    """The arguments an installed launch file declares with their defaults: run_plan.LAUNCH_ARGUMENTS (and
    AIRSIM_LAUNCH_ARGUMENTS with airsim=True) with the run and variant it passes to stack_launch_description."""
    call = next(c for c in ast.walk(ast.parse(path.read_text()))
                if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "stack_launch_description")
    airsim = any(k.arg == "airsim" and k.value.value for k in call.keywords)
    arguments = {**LAUNCH_ARGUMENTS, **(AIRSIM_LAUNCH_ARGUMENTS if airsim else {})}
    return {name: default for name, (default, _) in arguments.items()} | \
        {"run": call.args[0].value, "variant": call.args[1].value}


def check_launch(arguments: list[str], invocation: Invocation, folder: Path) -> Optional[str]:
    """brace_bringup's installed launch file, arguments it declares, and the run plan it starts for them."""
    if arguments[0] != "brace_bringup":
        return f"ros2 launch takes the package first: ros2 launch brace_bringup {arguments[0]}"
    arguments = arguments[1:]
    if not arguments:
        return "no launch file" if not invocation.command.inline else None
    path = share() / "launch" / arguments[0]
    if not path.is_file():
        return f"no launch file {arguments[0]} in brace_bringup (installed: " \
               f"{', '.join(sorted(p.name for p in path.parent.glob('*.launch.py')))})"
    given = {}
    for argument in arguments[1:]:
        name, sep, value = argument.partition(":=")
        if not sep:
            return f"'{argument}' is not name:=value"
        given[name] = value
    defaults = launch_file_defaults(path)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        return f"{arguments[0]} declares no argument {unknown} (it declares {', '.join(defaults)})"
    if invocation.synopsis:
        return None
    try:
        plan_for_launch(defaults | given | {"output": str(folder / "launch")})
    except (OSError, ValueError, KeyError, ConfigError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def ros_arguments(tokens: list[str]) -> tuple[Optional[str], dict, list[str], Optional[str]]:
    """`--ros-args` as (node name remap, -p parameters, --params-file files, error)."""
    node, parameters, files = None, {}, []
    pairs = iter(tokens)
    for flag in pairs:
        if flag == "--":
            break
        value = next(pairs, None)
        if value is None:
            return node, parameters, files, f"{flag} without a value"
        if flag in ("-r", "--remap"):
            node = value.partition("__node:=")[2] or node
        elif flag in ("-p", "--param"):
            name, sep, text = value.partition(":=")
            if not sep:
                return node, parameters, files, f"-p {value} is not name:=value"
            parameters[name] = yaml.safe_load(text)
        elif flag == "--params-file":
            files.append(value)
        elif flag not in ("--log-level", "-e", "--enclave"):
            return node, parameters, files, f"unknown ROS argument {flag}"
    return node, parameters, files, None


def check_ros2_run(arguments: list[str], invocation: Invocation) -> Optional[str]:
    """An installed console script of the package; its own arguments parse; --ros-args name declared parameters."""
    if len(arguments) < 2:
        return None if invocation.command.inline else "ros2 run needs a package and an executable"
    package, executable, rest = arguments[0], arguments[1], arguments[2:]
    if SCRIPTS.get(executable, ("",))[0] != package:
        return f"{package} has no console script {executable} " \
               f"({', '.join(sorted(n for n, (p, _) in SCRIPTS.items() if p == package))})"
    try:
        installed_executable(package, executable)
    except FileNotFoundError as exc:
        return str(exc)
    own, ros = (rest[:rest.index("--ros-args")], rest[rest.index("--ros-args") + 1:]) if "--ros-args" in rest \
        else (rest, [])
    if executable in CLIS:
        error = check_program(entry_point(SCRIPTS[executable][1]), [executable, *own], invocation)
        if error:
            return error
    elif own:
        return f"{executable} is a node: it takes only --ros-args, not {own}"
    node, parameters, files, error = ros_arguments(ros)
    if error:
        return error
    node = node or executable
    for name in files:
        if "PLACEHOLDER" in name:
            continue
        path = Path(name) if Path(name).is_absolute() else WORKSPACE / name
        if not path.is_file():
            return f"--params-file {name} does not exist"
        parameters = {**load_ros_parameters(path, node), **parameters}
    if invocation.synopsis:
        parameters = {k: v for k, v in parameters.items() if "PLACEHOLDER" not in str(v)}
    return check_node_values(package, executable, node, parameters) if parameters else None


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", (WORKSPACE / "Makefile").read_text(), re.MULTILINE))


def check_make(arguments: list[str]) -> Optional[str]:
    targets = [a for a in arguments if not a.startswith("-") and "=" not in a]
    missing = [t for t in targets if t not in makefile_targets()]
    return f"no Makefile target {missing}" if missing else None


def image_file(path: str) -> Optional[Path]:
    """The workspace file an image path is (None: not one of ours)."""
    for prefix, folder in IMAGE_PATHS.items():
        if path.startswith(prefix):
            return folder / path[len(prefix):]
    return None


def openvla_serve():
    spec = importlib.util.spec_from_file_location("openvla_serve", DOCKER / "openvla" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_image_path(tokens: list[str], invocation: Invocation) -> Optional[str]:
    """An image's program: a workspace file the image copies, executable (tini -- first: the image installs it)."""
    if tokens[0] == "/usr/bin/tini":
        rest = tokens[2:] if tokens[1:2] == ["--"] else tokens[1:]
        return check(Invocation(invocation.command, tuple(rest), invocation.synopsis), None) if rest else \
            "tini without a program"
    path = image_file(tokens[0])
    if path is None or not path.is_file():
        return f"{tokens[0]} is no file of the workspace"
    if not path.stat().st_mode & 0o111:
        return f"{relative(path)} is not executable"
    return None


def check_image_script(tokens: list[str]) -> Optional[str]:
    """`python /opt/openvla/serve.py [--check]`: the arguments the OpenVLA service's launcher takes."""
    path = image_file(tokens[1])
    if path != DOCKER / "openvla" / "serve.py":
        return f"{tokens[1]}: no launcher of this project"
    try:
        openvla_serve().mode([tokens[1], *tokens[2:]])
    except ValueError as exc:
        return str(exc)
    return None


def check_import(code: str) -> Optional[str]:
    missing = [m for m in re.split(r"[,\s]+", code.removeprefix("import ").strip()) if m and
               importlib.util.find_spec(m) is None]
    return f"cannot import {missing}" if missing else None


def workspace_files_exist(tokens: list[str]) -> Optional[str]:
    """Arguments that name a workspace file (src/, docs/, bench/ but its out/, docker/, scripts/, or an installed
    share) exist; a glob matches at least one file (it is expanded as the shell would, from the workspace root)."""
    prefixes = ("src/", "docs/", "bench/", "docker/", "scripts/")
    for token in tokens:
        if token.startswith(prefixes) or (token.startswith("/") and "/share/" in token and
                                          not token.startswith(tuple(IMAGE_PATHS))):
            if token.startswith("bench/out/") or any(p in token for p in ("PLACEHOLDER", "...", "…")):
                continue  # what a benchmark writes, or a placeholder
            path = token if token.startswith("/") else str(WORKSPACE / token)
            if not glob.glob(path):
                return f"{token} does not exist"
    return None


def globbed(tokens: list[str]) -> list[str]:
    """Arguments with globs expanded from the workspace root (as the shell would; a glob matching nothing stays)."""
    out = []
    for token in tokens:
        matches = sorted(glob.glob(str(WORKSPACE / token))) if any(c in token for c in "*?") and \
            not token.startswith("/") else []
        out += [str(Path(m).relative_to(WORKSPACE)) for m in matches] or [token]
    return out


def check(invocation: Invocation, folder: Optional[Path]) -> Optional[str]:
    """Why this invocation cannot start (None: the code that parses it accepts it)."""
    tokens = list(invocation.tokens)
    kind = program(tokens)
    error = workspace_files_exist(tokens)
    if error:
        return error
    tokens = globbed(tokens)
    if kind == "brace-run":
        arguments = tokens[1:] if tokens[0] == "brace-run" else tokens[3:]
        return check_brace_run(arguments, invocation)
    if kind == "launch":
        return check_launch(tokens[2:], invocation, folder or Path(tempfile.mkdtemp()))
    if kind == "run":
        return check_ros2_run(tokens[2:], invocation)
    if kind == "module":
        return check_module(tokens[2], tokens[3:], invocation)
    if kind == "bench":
        return check_bench(tokens[1], tokens[2:], invocation)
    if kind == "script":
        return check_program(entry_point(SCRIPTS[tokens[0]][1]), tokens, invocation)
    if kind == "make":
        return check_make(tokens[1:])
    if kind == "image path":
        return check_image_path(tokens, invocation)
    if kind == "image script":
        return check_image_script(tokens)
    if kind == "import":
        return check_import(tokens[2])
    return f"no check for {kind}"


def checked(folder: Path) -> tuple[dict[str, list[Invocation]], list[str]]:
    """Every invocation found, by source, and the failures as `file:line: command: why`."""
    found: dict[str, list[Invocation]] = {}
    failures = []
    errors: dict[tuple, Optional[str]] = {}  # the same command in several places is checked once
    for source, commands in all_commands().items():
        found[source] = [i for c in commands for i in invocations(c)]
        for invocation in found[source]:
            key = (invocation.tokens, invocation.synopsis, invocation.command.inline, invocation.command.environment)
            if key not in errors:
                errors[key] = check(invocation, folder)
            error = errors[key]
            if error:
                failures.append(f"{invocation}\n    {error}")
    return found, failures


# ------------------------------------------------------------------ the tests


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    here = Path.cwd()
    os.chdir(WORKSPACE)  # a command's relative paths are the workspace root's, where the docs run them
    try:
        return checked(tmp_path_factory.mktemp("user_commands"))
    finally:
        os.chdir(here)


def test_every_command_a_user_is_given_starts(results):
    found, failures = results
    counts = ", ".join(f"{len(v)} from {k}" for k, v in found.items())
    assert not failures, f"{len(failures)} of the commands a user is given cannot start ({counts}):\n" + \
        "\n".join(failures)


def test_the_commands_are_found_where_a_user_reads_them(results):
    """The extraction finds each kind of command in each place (a test that finds nothing checks nothing)."""
    found, _ = results
    kinds = {source: {program(list(i.tokens)) for i in invocations} for source, invocations in found.items()}
    assert {"brace-run", "launch", "run", "module", "bench", "script", "make"} <= kinds["docs"]
    assert {"brace-run", "script", "module", "image path", "image script", "import"} <= kinds["docker"]
    assert {"launch", "script"} <= kinds["launch files"]
    assert {"brace-run", "make", "bench", "module"} <= kinds["Makefile"]
    assert len(found["docs"]) >= 150 and len(found["launch files"]) >= 10
    assert any(s.startswith("docker/compose.yaml service planner") for s in skipped_services())
    robot = [i for i in found["docker"] if i.command.where.startswith("docker/compose.yaml") and
             program(list(i.tokens)) == "brace-run"]
    assert len(robot) == 1, "the robot service's default command is checked"


def test_the_robot_image_starts_the_variant_the_launch_file_starts():
    """The robot image's default (the compose service's and the Dockerfile's CMD) is the real-robot stack with
    the variant piper_real.launch.py starts by default: the image and `ros2 launch` run the same system."""
    defaults = launch_file_defaults(share() / "launch" / "piper_real.launch.py")
    robot = compose_services(DOCKER / "compose.yaml")["robot"]
    cmd = next(exec_form(a) for n, a in dockerfile_steps(DOCKER / "Dockerfile") if n == "CMD")
    for text in (expand(robot["command"], {}), cmd):
        tokens = shlex.split(text)
        assert tokens[:2] == ["brace-run", Path(defaults["run"]).stem], text
        assert tokens[tokens.index("--variants") + 1:] == [defaults["variant"]], text
    assert STACKS[RunConfig.load(defaults["run"]).stack.name].world == "", "the robot's stack runs until stopped"


@pytest.mark.parametrize("text, why", [
    ("brace-run piper_real", "name one variant"),
    ("brace-run piper_real --variants brace_erecap no_brace", "name one variant"),
    ("brace-run demo --variants nope", "unknown variants"),
    ("brace-run nope", "no run configuration"),
    ("brace-run demo --set nobody.x=1", "is not NODE.PARAM=VALUE"),
    ("brace-run demo --set embedded_sim.no_such_parameter=1", "declares no parameter"),
    ("brace-run demo --set embedded_sim.max_steps=abc", "max_steps"),
    ("brace-run demo --episdoes 4", "unrecognized arguments"),
    ("ros2 launch brace_bringup nope.launch.py", "no launch file"),
    ("ros2 launch piper_twin.launch.py", "takes the package first"),
    ("ros2 launch brace_bringup brace_sim.launch.py varient:=no_brace", "declares no argument"),
    ("ros2 launch brace_bringup brace_sim.launch.py variant:=nope", "unknown variant"),
    ("ros2 launch brace_bringup piper_real.launch.py num_agents:=2", "declares no argument"),
    ("ros2 run robot_bridge nope", "no console script"),
    ("ros2 run robot_bridge piper_arm --ros-args -p no_such_parameter:=1", "declares no parameter"),
    ("ros2 run robot_bridge piper_twin --ros-args -p fault_silent:=true -p nope:=1", "declares no parameter"),
    ("ros2 run robot_bridge piper_arm --ros-args -p max_joint_step_rad:=fast", "is a float"),
    ("ros2 run robot_bridge robot_preflight src/brace_bringup/params/robot/nope.yaml", "does not exist"),
    ("brace-audit report runs/x --cvs out", "unrecognized arguments"),
    ("brace-audit reprot runs/x", "invalid choice"),
    ("brace-audit trace <bag> --episodes N", "unknown flags"),
    ("python bench/fleet_load.py --max-stpes 40", "unrecognized arguments"),
    ("python bench/nope.py", "bench/nope.py does not exist"),
    ("python -m brace_bringup.nope", "no module"),
    ("make tests", "no Makefile target"),
])
def test_the_checks_refuse_a_command_that_cannot_start(text, why, tmp_path, monkeypatch):
    monkeypatch.chdir(WORKSPACE)
    found = invocations(Command("given:1", text))
    assert len(found) == 1
    error = check(found[0], tmp_path)
    assert error is not None and why in error, error


def test_a_synopsis_and_a_mention_are_read_as_such(tmp_path, monkeypatch):
    monkeypatch.chdir(WORKSPACE)
    for text, inline in (("brace-audit recover <bag> [--output OUT | --in-place]", False),
                         ("brace-audit report", True), ("brace-run <file>", True),
                         ("python bench/budget_targets.py --avx2 [--closed-loop demo one_thread k8]", False),
                         ("BRACE_PREFLIGHT= BRACE_ROBOT_COMMAND=\"brace-run piper_twin\" docker compose up", True),
                         ("robot_preflight $(ros2 pkg prefix brace_bringup)/share/brace_bringup/params/robot/*.yaml",
                          False)):
        found = invocations(Command("given:1", text, inline))
        assert len(found) == 1 and check(found[0], tmp_path) is None, (text, found)
