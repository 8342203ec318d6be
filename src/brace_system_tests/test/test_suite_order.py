"""The root conftest's LONGEST_FIRST names test files that exist, and collection puts them first."""

from __future__ import annotations

import importlib.util
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parents[3]


def root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", WORKSPACE / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_longest_first_file_exists_once():
    names = root_conftest().LONGEST_FIRST
    assert len(set(names)) == len(names)
    for name in names:
        assert len(list(WORKSPACE.glob(f"src/*/test/{name}"))) == 1, f"{name}: no (or more than one) such test file"


class Item:
    def __init__(self, path: str) -> None:
        self.path = Path(path)


def test_the_longest_files_come_first_and_the_rest_keep_their_order():
    conftest = root_conftest()
    first, second = conftest.LONGEST_FIRST[:2]
    items = [Item(f"a/test_{i}.py") for i in range(3)] + [Item(f"b/{second}"), Item(f"c/{first}")]
    conftest.pytest_collection_modifyitems(items)
    assert [i.path.name for i in items] == [first, second, "test_0.py", "test_1.py", "test_2.py"]
