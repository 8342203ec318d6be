"""WorldSchema: a world's action schema checked, then the call path's from the next call on; refusals keep the last."""

from __future__ import annotations

import json

import pytest

from brace_common.action_schema import ActionSchema
from brace_common.backoff import Backoff
from brace_common.validation import InvalidInput
from erecap_planner.call_path import CallOptions, CallPath
from erecap_planner.compressors import make_compressor
from erecap_planner.openai_client import OpenAIClient
from erecap_planner.server_backend import ServerBackend
from erecap_planner.testing import byte_tokenizer
from erecap_planner.world_schema import WorldSchema

GO = json.dumps({"max_steps": 2, "actions": {"go_to": {"target": {"choices": ["dock_1", "dock_2"]}}}})


class Log:
    """A logger that keeps what it was told, as (level, text)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda text, **kwargs: self.lines.append((level, text))

    def said(self, level: str, part: str) -> bool:
        """Whether a line at `level` holds `part`."""
        return any(lv == level and part in text for lv, text in self.lines)


def path(schema: ActionSchema | None = None, url: str = "http://127.0.0.1:9/v1") -> CallPath:
    """A call path on the planner server at `url` (none answers at the default: no call is made there)."""
    options = CallOptions("recency")
    backend = ServerBackend(OpenAIClient(url), byte_tokenizer(), options, backoff=Backoff(0.05, 0.2))
    return CallPath(backend, options, make_compressor("recency"), schema)


def schema_of(log: Log | None = None, planner_schema=lambda schema: schema) -> WorldSchema:
    world = WorldSchema(log if log is not None else Log())
    world.use(path(), planner_schema)
    return world


def test_a_worlds_schema_is_used_from_the_next_call_said_at_info_only_when_it_changes():
    log = Log()
    world = schema_of(log)
    assert not world.known.is_set() and world.path.schema is None
    world.offer("tiny", 0, GO, 2)
    assert world.known.is_set() and list(world.path.schema.actions) == ["go_to"]
    assert world.source == "tiny episode 0" and world.health().values["schema_updates"] == 1
    assert log.lines == [("info", "action schema of tiny episode 0: 2 agents, actions go_to")]
    world.offer("tiny", 0, GO, 2)  # the one in use: nothing to do
    assert world.health().values["schema_updates"] == 1 and len(log.lines) == 1
    again = json.dumps({**json.loads(GO), "max_steps": 3})  # republished with the same actions: said at debug
    world.offer("tiny", 0, again, 2)
    assert world.health().values["schema_updates"] == 2 and log.lines[-1][0] == "debug"


def test_a_file_schema_is_known_at_once():
    world = WorldSchema(Log())
    world.use(path(ActionSchema.from_json(GO)), lambda schema: schema)
    assert world.known.is_set()


@pytest.mark.parametrize("text, reason", [("", "no_action_schema"), ("{not json", "bad_action_schema_json"),
                                          ('{"actions": {"go": {}}, "entities": 5}', "malformed_schema")])
def test_a_refused_schema_names_why_and_the_one_in_use_stays(text, reason):
    world = schema_of()
    world.offer("tiny", 0, GO, 1)
    with pytest.raises(InvalidInput) as refused:
        world.offer("tiny", 1, text, 1)
    assert refused.value.reason == reason
    assert list(world.path.schema.actions) == ["go_to"] and world.source == "tiny episode 0"


def test_an_error_no_check_foresaw_is_refused_as_unexpected_and_logged_with_its_trace():
    def broken(schema: ActionSchema) -> ActionSchema:
        raise KeyError("a bug")

    log = Log()
    world = schema_of(log, broken)
    with pytest.raises(InvalidInput) as refused:
        world.offer("tiny", 0, GO, 1)
    assert refused.value.reason == "unexpected_error" and "KeyError" in str(refused.value)
    assert log.said("error", "Traceback") and not world.known.is_set()
