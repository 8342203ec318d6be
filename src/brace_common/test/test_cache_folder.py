"""built_once: concurrent first uses build a cache folder once; a failed build leaves nothing; a complete one stays."""

import multiprocessing
from pathlib import Path

import pytest

from brace_common.cache_folder import built_once


def _complete(folder: Path) -> bool:
    return (folder / "model.bin").is_file()


def _build(partial: Path) -> None:
    with open(partial.parent / "builds.log", "a") as log:
        log.write("built\n")
    (partial / "model.bin").write_bytes(b"x" * 100_000)


def _use(target: str, ready) -> None:
    ready.wait()
    folder = built_once(Path(target), _complete, _build)
    assert (folder / "model.bin").read_bytes() == b"x" * 100_000


def test_processes_on_a_cold_cache_build_once_and_all_read_it_whole(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    procs = [ctx.Process(target=_use, args=(str(tmp_path / "model"), ready)) for _ in range(4)]
    for p in procs:
        p.start()
    ready.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert (tmp_path / "builds.log").read_text() == "built\n"
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []


def test_a_failed_build_leaves_no_folder_and_an_incomplete_one_is_replaced(tmp_path):
    target = tmp_path / "model"

    def fail(partial: Path) -> None:
        (partial / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        built_once(target, _complete, fail)
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == ["model.lock"]
    target.mkdir()
    (target / "stale").write_text("old layout")
    built_once(target, _complete, _build)
    assert sorted(p.name for p in target.iterdir()) == ["model.bin"]
    built_once(target, _complete, fail)  # complete: never rebuilt, never removed
    assert (tmp_path / "builds.log").read_text() == "built\n"
