"""The message-boundary checks: every hostile value becomes an InvalidInput naming the field and a counter key."""

from __future__ import annotations

import math

import pytest

from brace_common.validation import (
    MAX_STEP,
    MAX_STEP_JUMP,
    InvalidInput,
    Rejections,
    check_agent_id,
    check_float,
    check_id,
    check_int,
    check_step,
    check_text,
    json_depth,
    parse_json_object,
    shorten,
)


@pytest.mark.parametrize("value,reason", [("", "empty_agent_id"), ("a" * 129, "long_agent_id"),
                                           ("agent 0", "bad_agent_id"), ("agent\n0", "bad_agent_id"),
                                           ("a\n", "bad_agent_id"), ("agent_0\n", "bad_agent_id")])
def test_ids_are_short_and_plain(value, reason):
    with pytest.raises(InvalidInput) as err:
        check_id("agent_id", value)
    assert err.value.reason == reason and "agent_id" in str(err.value)
    assert check_id("agent_id", "agent_0/brace:1") == "agent_0/brace:1"


@pytest.mark.parametrize("value", ["agent_0/../../x", "../x", "a.b", "a/b", "0agent", "a-b", "a\x00", "a" * 65, "",
                                   "arm_0\n"])
def test_agent_ids_are_ros_name_tokens(value):
    with pytest.raises(InvalidInput) as err:
        check_agent_id("agent_id", value)
    assert "agent_id" in str(err.value)
    assert check_agent_id("agent_id", "drone_7") == "drone_7" and check_agent_id("agent_id", "Arm0") == "Arm0"


def test_numbers_are_bounded_and_finite():
    assert check_int("tokens", 5, 1, 10) == 5
    with pytest.raises(InvalidInput):
        check_int("tokens", 2**64 - 1, 1, 10)
    for bad in (math.nan, math.inf, -math.inf, 2.0):
        with pytest.raises(InvalidInput):
            check_float("severity", bad, 0.0, 1.0)


def test_steps_may_not_jump_absurdly():
    assert check_step("step", 10, latest=5) == 10
    with pytest.raises(InvalidInput) as err:
        check_step("step", 2**64 - 1)
    assert err.value.reason == "range_step"
    with pytest.raises(InvalidInput) as err:
        check_step("step", 5 + MAX_STEP_JUMP + 1, latest=5)
    assert err.value.reason == "jump_step"
    assert check_step("step", MAX_STEP) == MAX_STEP


def test_json_is_capped_in_size_and_depth_before_it_is_parsed():
    deep = "[" * 100_000 + "]" * 100_000  # json.loads would hit RecursionError
    assert json_depth(deep) == 100_000 and json_depth('{"a": "[[[[["}') == 1
    with pytest.raises(InvalidInput) as err:
        parse_json_object("parameters_json", '{"a": ' + deep + "}", max_chars=10**7)
    assert err.value.reason == "deep_parameters_json"
    with pytest.raises(InvalidInput) as err:
        parse_json_object("parameters_json", '{"a": "' + "x" * 5000 + '"}')
    assert err.value.reason == "long_parameters_json"
    for bad in ("[1, 2]", "{", "nope"):
        with pytest.raises(InvalidInput):
            parse_json_object("parameters_json", bad)
    assert parse_json_object("parameters_json", "") == {}
    assert parse_json_object("parameters_json", '{"target": "shelf_3"}') == {"target": "shelf_3"}


def test_text_is_capped_and_rejections_are_counted_by_reason():
    with pytest.raises(InvalidInput):
        check_text("text", "x" * 9000)
    with pytest.raises(InvalidInput):
        check_text("text", "  ", allow_empty=False)
    log = Rejections()
    log.reject("trigger", InvalidInput("long_agent_id", "agent_id is long"), "a" * 1000)
    log.reject("trigger", ValueError("other"))
    assert log.counts == {"trigger.long_agent_id": 1, "trigger.malformed": 1} and log.total == 2
    assert len(shorten("a" * 1000)) < 80


def test_news_warns_of_the_rejections_since_the_last_report_only():
    log = Rejections()
    assert log.news().warnings == ()
    log.reject("plan", ValueError("bad"))
    log.reject("plan", ValueError("bad"))
    assert log.news().warnings == ("2 inputs rejected",)
    assert log.news().warnings == ()  # reported once; health() keeps the totals
    assert log.health().values == {"rejected.plan.malformed": 2}
