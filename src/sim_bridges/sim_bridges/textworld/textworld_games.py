"""TextWorld cooking games: which game a seed and the difficulty settings name, where it lives in the game folder,
and how it is made. ROS-free.

Games come from textworld's own `tw-cooking` generator (what `tw-make tw-cooking --recipe R --take T --go G --cook
--cut --open --seed S` runs), on this machine: nothing is downloaded. The same settings and seed give the same game,
so a game is made once and kept in the game folder as `<name>.z8` (the Z-machine file textworld plays) beside
`<name>.json` (the game's logic, which textworld reads for admissible commands, facts and the walkthrough). A game is
compiled in a private folder and moved in when complete, so a reader never sees half a game.

`GameSupply` makes the games of the episodes to come in child processes (`python -m
sim_bridges.textworld.textworld_games`), so a world node never blocks its executor for the seconds a game takes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from brace_common.config import ConfigError
from brace_common.counters import Health

CHALLENGE = "tw-cooking"
"""The textworld challenge the games come from."""
LOCATIONS = (1, 6, 9, 12)
"""The numbers of rooms tw-cooking can lay out (its `--go`)."""
MAX_RECIPE = 5
"""Most ingredients a tw-cooking recipe has."""
LOG_TAIL_CHARS = 2000
"""How much of a failed child's log an error quotes."""


class GameError(RuntimeError):
    """A game could not be made (the child that made it failed, or left no game behind)."""


@dataclass(frozen=True)
class GameSpec:
    """One cooking game: tw-cooking's difficulty settings and the seed (same spec, same game)."""

    seed: int
    recipe: int = 3      # ingredients in the recipe (1-5)
    take: int = 3        # of which the player must find (0-recipe; the others start in the inventory)
    go: int = 9          # rooms (1, 6, 9 or 12)
    cook: bool = True    # some ingredients must be cooked
    cut: bool = True     # some ingredients must be cut
    open: bool = True    # containers and doors start closed

    def validate(self) -> None:
        """ConfigError naming the first setting tw-cooking cannot make a game of (the parameter of the same name)."""
        if not 0 <= self.seed <= 2**31 - 1:
            raise ConfigError("seed", f"{self.seed} is outside 0..{2**31 - 1}")
        if not 1 <= self.recipe <= MAX_RECIPE:
            raise ConfigError("recipe", f"{self.recipe} ingredients: a recipe has 1 to {MAX_RECIPE}")
        if not 0 <= self.take <= self.recipe:
            raise ConfigError("take", f"{self.take}: the ingredients to find are 0 to recipe ({self.recipe})")
        if self.go not in LOCATIONS:
            raise ConfigError("go", f"{self.go} rooms: tw-cooking lays out {', '.join(map(str, LOCATIONS))}")

    @property
    def name(self) -> str:
        """The game's file name without extension, e.g. 'tw-cooking-recipe3-take3-go9-cook-cut-open-seed7'."""
        skills = "".join(f"-{skill}" for skill in ("cook", "cut", "open") if getattr(self, skill))
        return f"{CHALLENGE}-recipe{self.recipe}-take{self.take}-go{self.go}{skills}-seed{self.seed}"

    def settings(self) -> dict:
        """The settings tw-cooking's `make` reads (what tw-make passes for these flags)."""
        return {"recipe": self.recipe, "take": self.take, "go": self.go, "cook": self.cook, "cut": self.cut,
                "open": self.open, "drop": False, "recipe_seed": 0, "split": None}

    def at_level(self, level: str) -> GameSpec:
        """This spec's seed with the settings of difficulty `level` (one of LEVELS; ConfigError naming `level`)."""
        if level not in LEVELS:
            raise ConfigError("level", f"'{level}' is not a level ({', '.join(LEVELS)})")
        return GameSpec(self.seed, **LEVELS[level])

    def arguments(self) -> list[str]:
        """This spec as the command line of `python -m sim_bridges.textworld.textworld_games`."""
        out = []
        for key, value in asdict(self).items():
            if isinstance(value, bool):
                out.append(f"--{key}" if value else f"--no-{key}")
            else:
                out += [f"--{key}", str(value)]
        return out


LEVELS: dict[str, dict] = {
    "L1": {"recipe": 1, "take": 1, "go": 1, "cook": False, "cut": False, "open": False},
    "L2": {"recipe": 2, "take": 2, "go": 6, "cook": True, "cut": True, "open": True},
    "L3": {"recipe": 3, "take": 3, "go": 9, "cook": True, "cut": True, "open": True},
}
"""The difficulty ladder (parameter and bench option `level`): L1 one room, one ingredient to find, nothing to cook,
cut or open; L2 two ingredients in six rooms, cooked and cut, behind closed doors; L3 three in nine (GameSpec's
defaults)."""


def game_file(spec: GameSpec, folder: Path) -> Path:
    """Where the game of `spec` lives in `folder` (its .z8; the .json beside it)."""
    return Path(folder) / f"{spec.name}.z8"


def cached(spec: GameSpec, folder: Path) -> Optional[Path]:
    """The game file of `spec` when `folder` holds the whole game (.z8 and .json), else None."""
    path = game_file(spec, folder)
    return path if path.is_file() and path.with_suffix(".json").is_file() else None


def generate_game(spec: GameSpec, folder: Path) -> Path:
    """The game of `spec` in `folder`, made now unless it is there already; its .z8 file.

    ConfigError for settings tw-cooking cannot make a game of; textworld's own errors when generation fails.
    """
    # textworld's generator loads in ~0.6 s; the specs, the files and GameSupply need none of it (a config, a parent)
    import textworld
    import textworld.challenges
    from textworld.generator import compile_game

    spec.validate()
    folder = Path(folder).expanduser()
    found = cached(spec, folder)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    target = game_file(spec, folder)
    _, make, _ = textworld.challenges.CHALLENGES[CHALLENGE]
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{spec.name}-") as private:
        options = textworld.GameOptions()
        options.seeds = spec.seed
        options.path = str(Path(private) / target.name)
        options.file_ext = ".z8"
        options.force_recompile = True
        with warnings.catch_warnings():  # jericho's, on the walkthrough check: see textworld_game.quiet_interpreter
            warnings.filterwarnings("ignore", module="jericho")
            made = Path(compile_game(make(settings=spec.settings(), options=options), options))
        # the logic first, the game last: `cached` sees a game only when both are in
        os.replace(made.with_suffix(".json"), target.with_suffix(".json"))
        os.replace(made, target)
    return target


class GameSupply:
    """Games for episodes to come, each made by a child process (`request`), polled without waiting (`ready`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder).expanduser()
        self.children: dict[GameSpec, tuple[subprocess.Popen, Path]] = {}

    def health(self) -> Health:
        """The games being made now (`games_being_made`)."""
        return Health({"games_being_made": len(self.children)})

    def request(self, spec: GameSpec) -> None:
        """Start making the game of `spec` unless it is made or being made."""
        if spec in self.children or cached(spec, self.folder) is not None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / f".{spec.name}.log"
        package_root = str(Path(__file__).absolute().parents[2])  # the folder holding sim_bridges/
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH"))
                                                          if p)}
        with log.open("w") as out:
            child = subprocess.Popen([sys.executable, "-m", __name__, *spec.arguments(), "--output", str(self.folder)],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        self.children[spec] = (child, log)

    def ready(self, spec: GameSpec) -> Optional[Path]:
        """The game file of `spec` once it is made; None while its child runs (`request` it first, unless it is
        made already); GameError (quoting the child's log) when the child failed."""
        running = self.children.get(spec)
        if running is None:
            found = cached(spec, self.folder)
            if found is None:
                raise GameError(f"game {spec.name} was not requested and is not in {self.folder}")
            return found
        child, log = running
        if child.poll() is None:
            return None
        del self.children[spec]
        found = cached(spec, self.folder)
        if child.returncode != 0 or found is None:
            tail = log.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log.is_file() else ""
            raise GameError(f"making game {spec.name} failed (exit {child.returncode}):\n{tail}")
        log.unlink(missing_ok=True)
        return found

    def close(self) -> None:
        """Stop the children still making games (their private folders are left for the next run to ignore)."""
        for child, _ in self.children.values():
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=10.0)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self.children.clear()


def main(argv: Optional[list[str]] = None) -> int:
    """Make one game into a folder (GameSupply's child; also usable by hand); print its .z8 path."""
    ap = argparse.ArgumentParser(prog="python -m sim_bridges.textworld.textworld_games",
                                 description="Make a TextWorld cooking game (tw-cooking) into a game folder.")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--recipe", type=int, default=GameSpec.recipe)
    ap.add_argument("--take", type=int, default=GameSpec.take)
    ap.add_argument("--go", type=int, default=GameSpec.go)
    for skill in ("cook", "cut", "open"):
        ap.add_argument(f"--{skill}", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--level", choices=tuple(LEVELS), default=None,
                    help="a level of the difficulty ladder: its settings replace the ones above")
    ap.add_argument("--output", type=Path, required=True, help="the game folder")
    args = ap.parse_args(argv)
    spec = GameSpec(args.seed, args.recipe, args.take, args.go, args.cook, args.cut, args.open)
    try:
        spec = spec.at_level(args.level) if args.level else spec
        print(generate_game(spec, args.output))
    except ConfigError as exc:
        print(f"invalid settings: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
