"""Plan parsing and schema validation; a fuzz of 1,000 malformed outputs raises only PlanError."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brace_common.action_schema import ActionSchema, PlanError
from erecap_planner.plan_parser import parse_plan

SCHEMA = ActionSchema.from_dict({
    "max_steps": 4,
    "actions": {
        "move_to": {"target": {"choices": ["dock_1", "dock_2", "shelf_3"]}},
        "pick": {"object": {"type": "string"}},
        "wait": {"steps": {"type": "integer", "required": False}},
    },
})


@pytest.mark.parametrize("text", [
    '{"action": "move_to", "parameters": {"target": "dock_2"}}',
    'Sure! ```json\n{"plan": [{"action": "pick", "parameters": {"object": "cup"}}]}\n```',
    '[{"action": "wait"}, {"action": "move_to", "parameters": {"target": "shelf_3"}}]',
    '{"current_step_analysis": {}, "next_step": {"action": "wait", "parameters": {"steps": 2}}}',
])
def test_valid_plans(text):
    steps = parse_plan(text, SCHEMA)
    assert steps and all(s.action in SCHEMA.actions for s in steps)
    assert json.loads(steps[0].parameters_json()) == steps[0].parameters


@pytest.mark.parametrize("text,reason", [
    ("no json here", "no_json"),
    ('{"action": "fly", "parameters": {}}', "unknown_action"),
    ('{"action": "move_to", "parameters": {"target": "moon"}}', "hallucinated_value"),
    ('{"action": "move_to", "parameters": {}}', "missing_parameter"),
    ('{"action": "pick", "parameters": {"object": 3}}', "bad_parameter_type"),
    ('{"action": "pick", "parameters": {"object": "a", "speed": 2}}', "unknown_parameter"),
    ('{"action": "wait", "parameters": {"steps": true}}', "bad_parameter_type"),
    ('{"plan": []}', "empty_plan"),
    ('{"next_step": null}', "empty_plan"),
    ('[' + ','.join(['{"action": "wait"}'] * 5) + ']', "too_long"),
    ('{"foo": 1}', "bad_shape"),
    # cut at the token limit: not the one-step plan nested in it
    ('{"plan": [{"action": "wait", "parameters": {}}, {"action": "pick", "parame', "truncated"),
    ('[t=0 a] then {"plan": [{"action": "wait"}', "truncated"),
])
def test_invalid_plans_give_reasons(text, reason):
    assert refusal(lambda: parse_plan(text, SCHEMA)) == reason


def refusal(parse) -> str:
    """The reason of the PlanError `parse()` raises."""
    with pytest.raises(PlanError) as err:
        parse()
    return err.value.reason


def test_ids_spelled_another_way_are_respelled_only_when_asked_and_only_to_one_value():
    text = '[{"action": "move_to", "parameters": {"target": "Shelf-3"}}, {"action": "move_to", "parameters": ' \
           '{"target": "dock2"}}, {"action": "pick", "parameters": {"object": "cup_1"}}]'
    with pytest.raises(PlanError) as err:
        parse_plan(text, SCHEMA)  # strict by default
    assert err.value.reason == "hallucinated_value"
    respelled: list[str] = []
    steps = parse_plan(text, SCHEMA, respelled)
    assert [s.parameters.get("target") for s in steps] == ["shelf_3", "dock_2", None]
    assert respelled == ["Shelf-3 -> shelf_3", "dock2 -> dock_2"]  # free strings (pick.object) are left alone
    ambiguous = ActionSchema.from_dict({"actions": {"go": {"to": {"choices": ["a_1", "a1", "b"]}}}})
    for value in ("A-1", "moon", "__"):  # spells two values, none, nothing
        with pytest.raises(PlanError) as err:
            parse_plan(f'{{"action": "go", "parameters": {{"to": "{value}"}}}}', ambiguous, respelled := [])
        assert err.value.reason == "hallucinated_value" and respelled == []
    with pytest.raises(PlanError) as err:  # a step whose action is not a name stays the schema's error
        parse_plan('{"action": ["go"], "parameters": {"to": "b"}}', ambiguous, [])
    assert err.value.reason in ("unknown_action", "bad_step")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["action", "parameters", "plan", "next_step", "target", "object", "steps", "x", "think",
                         "subtasks", "subtask", "deliver", "dock"]) | st.text(max_size=5),
        inner, max_size=4),
    max_leaves=12,
)
malformed = st.one_of(
    st.text(max_size=200),
    json_values.map(lambda v: json.dumps(v)),
    json_values.map(lambda v: "prefix ```json\n" + json.dumps(v)[:-1]),  # truncated JSON
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
    st.integers(1, 3000).map(lambda n: "[" * n),                     # deep nesting
    st.none() | st.integers(),                                         # not even text
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=malformed)
def test_fuzz_malformed_outputs_raise_only_plan_error(text):
    try:
        steps = parse_plan(text, SCHEMA, [])
    except PlanError:
        return
    assert all(s.action in SCHEMA.actions for s in steps)


RECAP_SCHEMA = SCHEMA.extend({"subtasks": {"deliver": {"object": {"choices": ["cup", "box"]},
                                                       "dock": {"choices": ["dock_1", "dock_2"]}}}})


def test_a_recap_answer_holds_a_thought_and_primitive_and_composite_subtasks():
    from erecap_planner.plan_parser import parse_recap

    thought, subtasks = parse_recap(
        'I will: {"think": "the cup first", "subtasks": [{"action": "pick", "parameters": {"object": "cup"}}, '
        '{"subtask": "deliver", "parameters": {"object": "box", "dock": "dock_2"}}]}', RECAP_SCHEMA)
    assert thought == "the cup first"
    assert [(s.step.action, s.composite) for s in subtasks] == [("pick", False), ("deliver", True)]
    assert subtasks[1].text() == "[deliver(box, dock_2)]"
    assert parse_recap('{"subtasks": []}', RECAP_SCHEMA) == ("", [])   # an empty S closes the frame


@pytest.mark.parametrize("text,reason", [
    ('{"plan": [{"action": "wait"}]}', "bad_shape"),
    ('{"think": 3, "subtasks": []}', "bad_shape"),
    ('{"subtasks": [{"subtask": "fly", "parameters": {}}]}', "unknown_action"),
    ('{"subtasks": [{"subtask": "deliver", "parameters": {"object": "moon", "dock": "dock_1"}}]}',
     "hallucinated_value"),
    ('{"subtasks": [' + ", ".join(['{"action": "wait"}'] * 9) + ']}', "too_long"),   # max(max_steps, 8)
    ('{"subtasks": [{"subtask": "deliver"', "truncated"),
])
def test_a_malformed_recap_answer_is_a_plan_error_with_its_reason(text, reason):
    from erecap_planner.plan_parser import parse_recap

    assert refusal(lambda: parse_recap(text, RECAP_SCHEMA)) == reason


def test_a_schema_refuses_a_subtask_named_as_an_action():
    with pytest.raises(ValueError, match="also an action"):
        SCHEMA.extend({"subtasks": {"pick": {}}})
    assert RECAP_SCHEMA.to_dict()["subtasks"]["deliver"]["dock"] == {"type": "string", "choices": ["dock_1", "dock_2"]}
    assert ActionSchema.from_dict(RECAP_SCHEMA.to_dict()) == RECAP_SCHEMA


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=malformed)
def test_fuzz_malformed_recap_answers_raise_only_plan_error(text):
    from erecap_planner.plan_parser import parse_recap

    try:
        _, subtasks = parse_recap(text, RECAP_SCHEMA)
    except PlanError:
        return
    assert all(s.step.action in (RECAP_SCHEMA.subtasks if s.composite else RECAP_SCHEMA.actions) for s in subtasks)
