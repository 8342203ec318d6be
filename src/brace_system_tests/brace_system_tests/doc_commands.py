"""The commands the docs tell a reader to type, and what the code says about each one.

A command is found in a fenced code block (one per line, `\\` continuations joined) or an inline code span, wherever
one of the workspace's entry points begins it: `brace-run`, `brace-audit`, `python -m <module>`, `python
bench/<script>.py`, `ros2 launch brace_bringup <file>`, `ros2 run <package> <executable>`, `make <target>`. Each is
checked against the code without running it: the module, script, launch file, executable or target exists, every
`--option` it names is one the program accepts, a run configuration and its variants load, a launch argument is
declared. `<...>` is a placeholder and `[...]` an optional part: their values are not checked, their options are.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import runpy
import shlex
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from brace_audit.audit import argument_parser as audit_parser
from brace_bringup.run_config import RunConfig
from brace_bringup.run_plan import AIRSIM_LAUNCH_ARGUMENTS, LAUNCH_ARGUMENTS
from brace_bringup.runner import argument_parser as run_parser

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"<[^<>]*>")
OPTIONAL = re.compile(r"\[[^\[\]]*\]")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
STARTS = re.compile(r"(?:^|[\s(;&|])(?=(?:brace-run|brace-audit)(?:\s|$)|(?:python3? -m |python3? bench/|ros2 launch "
                    r"|ros2 run |make )\S)")
SEPARATORS = re.compile(r"\s(?:&&|\|\||;|\|)\s|\$\(|\)")


@dataclass(frozen=True)
class DocCommand:
    """One command as a page writes it: the page, its line, the text."""

    page: Path
    line: int
    text: str

    def where(self) -> str:
        """page:line: command, for a failure message."""
        return f"{self.page}:{self.line}: {self.text}"


def commands_in(page: Path, root: Path) -> Iterator[DocCommand]:
    """Every command of `page` (a Markdown file), with its page relative to `root`."""
    text = page.read_text()
    relative = page.relative_to(root)
    fenced = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        fenced.append((block.start(), block.end()))
        joined, start = "", None
        for offset, line in enumerate(block.group(1).splitlines()):
            line = re.sub(r"(^|\s)#.*$", "", line).rstrip()
            if start is None:
                start = first + offset
            if line.endswith("\\"):
                joined += line[:-1] + " "
                continue
            yield from _split(relative, start, joined + line)
            joined, start = "", None
    for span in SPAN.finditer(text):
        if any(a <= span.start() < b for a, b in fenced):
            continue
        yield from _split(relative, text.count("\n", 0, span.start()) + 1, span.group(1))


def _split(page: Path, line: int, text: str) -> Iterator[DocCommand]:
    """The commands that begin in `text` (a shell line: `&&`, `;`, pipes and `$(...)` separate them)."""
    text = text.strip().removeprefix("$ ")
    for part in SEPARATORS.split(text):
        for match in STARTS.finditer(part):
            command = " ".join(part[match.start():].strip(" (;&|").split())
            yield DocCommand(page, line, command)
            break


def words(text: str) -> list[str]:
    """The command's words, placeholders kept as one word each."""
    text = PLACEHOLDER.sub("PLACEHOLDER", text)
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every --option of `parser` and of its subcommands."""
    found = {s for action in parser._actions for s in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= options_of(sub)
    return found


class _Parsed(Exception):
    """Raised instead of parsing: carries the parser a program built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def parser_of(run: Callable[[], object], name: str, path: Optional[Path] = None) -> Optional[argparse.ArgumentParser]:
    """The argparse parser of the program `run` starts as `__main__` (a module, or a script whose folder `path` is
    first on sys.path, as Python runs one), caught when it first parses its command line, before it does anything;
    None when it never parses one. What the program raises before that propagates."""

    def caught(parser, *args, **kwargs):
        raise _Parsed(parser)

    saved_argv, saved_path = sys.argv, list(sys.path)
    original = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = caught
    sys.argv = [name]
    if path is not None:
        sys.path.insert(0, str(path))
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported as its package's part
            run()
    except _Parsed as parsed:
        return parsed.parser
    except SystemExit:
        return None
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = original
        sys.argv, sys.path[:] = saved_argv, saved_path
    return None


class CommandChecker:
    """What the workspace at `root` says about a command: a list of problems (empty: the code accepts it)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_parser, self.audit_parser = run_parser(), audit_parser()
        self.launch_arguments = set(LAUNCH_ARGUMENTS) | set(AIRSIM_LAUNCH_ARGUMENTS)
        self.packages = {p.parent.name for p in root.glob("src/*/*/__init__.py") if p.parent.name == p.parent.parent.name}
        self.parsers: dict[str, Optional[argparse.ArgumentParser]] = {}
        self.make_targets = set(re.findall(r"^([A-Za-z][\w-]*):", (root / "Makefile").read_text(), re.MULTILINE))

    def problems(self, command: str) -> list[str]:
        """Why the code would reject `command` (empty when it would not)."""
        argv = words(command)
        if argv[:1] == ["brace-run"] or argv[:3] in (["python", "-m", "brace_bringup.runner"],
                                                     ["python3", "-m", "brace_bringup.runner"]):
            return self._brace_run(command, argv[1 if argv[0] == "brace-run" else 3:])
        if argv[:1] == ["brace-audit"] or argv[2:3] == ["brace_audit.audit"]:
            return self._parsed(self.audit_parser, command, argv[1 if argv[0] == "brace-audit" else 3:])
        if argv[0] in ("python", "python3") and argv[1:2] == ["-m"]:
            return self._module(command, argv[2])
        if argv[0] in ("python", "python3") and argv[1].startswith("bench/"):
            return self._script(command, argv[1])
        if argv[:3] == ["ros2", "launch", "brace_bringup"] and len(argv) > 3:
            return self._launch(argv[3], argv[4:])
        if argv[:2] == ["ros2", "run"] and len(argv) > 3:
            return self._ros2_run(argv[2], argv[3])
        if argv[0] == "make" and len(argv) > 1 and not argv[1].startswith("-"):
            return [] if argv[1] in self.make_targets else [f"no Makefile target '{argv[1]}'"]
        return []

    def _unknown_options(self, command: str, known: set[str]) -> list[str]:
        return [f"unknown option {o}" for o in OPTION.findall(PLACEHOLDER.sub("", command)) if o not in known]

    def _parsed(self, parser: argparse.ArgumentParser, command: str, args: list[str]) -> list[str]:
        problems = self._unknown_options(command, options_of(parser) | {"--help"})
        if problems or OPTIONAL.search(command) or any(m in command for m in ("...", "…", " / ")) \
                or "PLACEHOLDER" in args:
            return problems  # an optional part, an ellipsis, a list or a placeholder: not a command line as it stands
        try:
            parser.exit_on_error = False
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for sub in action.choices.values():
                        sub.exit_on_error = False
            with contextlib.redirect_stderr(io.StringIO()) as said:
                parser.parse_args(args)
        except argparse.ArgumentError as exc:
            return [f"{parser.prog} rejects it: {exc}"]
        except SystemExit:
            error = (said.getvalue().strip().splitlines() or ["(no message)"])[-1]
            if "arguments are required" in error:
                return []  # a program named in the text (`brace-audit report`), its arguments left out
            return [f"{parser.prog} rejects it: {error}"]
        return []

    def _brace_run(self, command: str, args: list[str]) -> list[str]:
        problems = self._parsed(self.run_parser, command, args)
        positional = [a for a in args if not a.startswith("-")]
        if problems or not positional or "PLACEHOLDER" in positional[0] or OPTIONAL.search(command):
            return problems
        config = positional[0]
        if (self.root / config).is_file():
            config = str(self.root / config)
        try:
            cfg = RunConfig.load(config)
        except (OSError, ValueError) as exc:
            return [f"run configuration {positional[0]!r}: {exc}"]
        if "--variants" in args:
            named = []
            for a in args[args.index("--variants") + 1:]:
                if a.startswith("-"):
                    break
                named.append(a)
            problems += [f"run {positional[0]!r} has no variant {v!r}" for v in named
                         if "PLACEHOLDER" not in v and v not in cfg.variants]
        return problems

    def _module(self, command: str, module: str) -> list[str]:
        if module.split(".")[0] not in self.packages:
            return []  # another project's module (llama_cpp.server, venv): not ours to check
        if importlib.util.find_spec(module) is None:
            return [f"no module {module}"]
        return self._program(command, f"-m {module}", lambda: runpy.run_module(module, run_name="__main__"))

    def _script(self, command: str, script: str) -> list[str]:
        path = self.root / script
        if not path.is_file():
            return [f"no script {script}"]
        return self._program(command, script, lambda: runpy.run_path(str(path), run_name="__main__"), path.parent)

    def _program(self, command: str, name: str, run: Callable[[], object], path: Optional[Path] = None) -> list[str]:
        """The options of the program `run` starts (its parser, caught as it parses), against the command's."""
        if name not in self.parsers:
            self.parsers[name] = parser_of(run, name, path)
        parser = self.parsers[name]
        if parser is None:
            return []  # a program without argparse (none of ours so far): nothing to check against
        after = command.split(name.removeprefix("-m "), 1)[-1]
        return self._parsed(parser, after, words(after))

    def _launch(self, file: str, args: list[str]) -> list[str]:
        if not (self.root / "src/brace_bringup/launch" / file).is_file():
            return [f"no launch file {file}"]
        values = dict(a.split(":=", 1) for a in args if ":=" in a)
        problems = [f"{file} declares no argument {name!r}" for name in values if name not in self.launch_arguments]
        run = values.get("run")
        if run and "PLACEHOLDER" not in run:
            try:
                cfg = RunConfig.load(run)
            except (OSError, ValueError) as exc:
                return problems + [f"run:={run}: {exc}"]
            variant = values.get("variant")
            if variant and "PLACEHOLDER" not in variant and variant not in cfg.variants:
                problems.append(f"run {run!r} has no variant {variant!r}")
        return problems

    def _ros2_run(self, package: str, executable: str) -> list[str]:
        setup = self.root / "src" / package / "setup.py"
        if not setup.is_file() or "PLACEHOLDER" in executable:
            return []  # not a package of the workspace
        entry = re.search(rf"[\"']{re.escape(executable)}\s*=", setup.read_text())
        return [] if entry else [f"package {package} has no executable {executable}"]
