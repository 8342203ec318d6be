"""The common action schema: load, extend, validate steps and plans, JSON Schema."""

import json
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from brace_common.action_schema import ActionSchema, Fault, PlanError, Step, merged, step_from_message
from brace_common.validation import InvalidInput

BASE = {
    "max_steps": 3,
    "entities": {"place": []},
    "kinds": {"mobile": ["move_to", "wait"], "arm": ["grip", "wait"]},
    "actions": {
        "move_to": {"target": {"type": "string", "entity": "place"},
                    "speed": {"type": "number", "required": False, "min": 0.0, "exclusive_min": True, "max": 2.0}},
        "grip": {"force": {"type": "integer", "low": 1, "high": 10}, "soft": {"type": "boolean", "required": False}},
        "wait": {"seconds": {"type": "number", "required": False, "max": 60.0}},
    },
}
SCHEMA = ActionSchema.from_dict(BASE)


def test_a_valid_plan_becomes_steps_with_numbers_as_floats():
    steps = SCHEMA.check_plan([{"action": "move_to", "parameters": {"target": "dock", "speed": 1}},
                               {"action": "wait"}])
    assert steps == [Step("move_to", {"target": "dock", "speed": 1.0}), Step("wait", {})]
    assert isinstance(steps[0].parameters["speed"], float)
    assert steps[0].text() == "move_to(target=dock, speed=1.0)" and steps[0].values_text() == "move_to(dock, 1.0)"
    assert steps[0].parameters_json() == '{"speed": 1.0, "target": "dock"}'
    assert steps[0].call() == 'move_to{"speed": 1.0, "target": "dock"}'


@pytest.mark.parametrize("raw, reason, index, key", [
    ([], Fault.EMPTY_PLAN, None, None),
    ([{"action": "wait"}] * 4, Fault.LONG_PLAN, None, None),
    (["wait"], Fault.NOT_A_STEP, 0, None),
    ([{"action": "wait"}, {"action": "fly"}], Fault.UNKNOWN_SKILL, 1, None),
    ([{"action": "wait", "parameters": [1]}], Fault.BAD_PARAMETERS, 0, None),
    ([{"action": "move_to", "parameters": {}}], Fault.MISSING_PARAMETER, 0, "target"),
    ([{"action": "move_to", "parameters": {"target": "a", "yaw": 1}}], Fault.UNKNOWN_PARAMETER, 0, "yaw"),
    ([{"action": "move_to", "parameters": {"target": 3}}], Fault.BAD_PARAMETER_TYPE, 0, "target"),
    ([{"action": "grip", "parameters": {"force": True}}], Fault.BAD_PARAMETER_TYPE, 0, "force"),
    ([{"action": "grip", "parameters": {"force": 2.5}}], Fault.BAD_PARAMETER_TYPE, 0, "force"),
    ([{"action": "grip", "parameters": {"force": 11}}], Fault.OUT_OF_RANGE, 0, "force"),
    ([{"action": "move_to", "parameters": {"target": "a", "speed": 0}}], Fault.OUT_OF_RANGE, 0, "speed"),
    ([{"action": "wait", "parameters": {"seconds": math.nan}}], Fault.BAD_PARAMETER_VALUE, 0, "seconds"),
    ([{"action": "move_to", "parameters": {"target": "x" * 200}}], Fault.BAD_PARAMETER_VALUE, 0, "target"),
])
def test_a_bad_plan_is_refused_naming_the_step_the_key_and_why(raw, reason, index, key):
    with pytest.raises(PlanError) as err:
        SCHEMA.check_plan(raw)
    assert err.value.reason == reason and err.value.index == index and err.value.key == key
    assert str(reason) in str(err.value)


def test_an_agent_kind_calls_only_its_actions():
    assert SCHEMA.actions_of("mobile") == ("move_to", "wait") and SCHEMA.actions_of(None) == tuple(SCHEMA.actions)
    with pytest.raises(PlanError) as err:
        SCHEMA.check_plan([{"action": "grip", "parameters": {"force": 2}}], kind="mobile")
    assert err.value.reason == Fault.SKILL_NOT_FOR_KIND
    assert SCHEMA.check_plan([{"action": "grip", "parameters": {"force": 2}}], kind="arm")[0].parameters == {"force": 2}


def test_a_world_extends_the_base_with_its_entities_and_ranges_without_copying_it():
    world = SCHEMA.extend({"entities": {"place": ["dock_1", "shelf_1"]},
                           "kinds": {"arm": ["wait"]}, "actions": {"wait": {"seconds": {"max": 5.0}}, "grip": None}})
    assert world.actions["move_to"].parameters["target"].choices == ("dock_1", "shelf_1")
    assert "grip" not in world.actions and world.kinds == {"mobile": ("move_to", "wait"), "arm": ("wait",)}
    with pytest.raises(PlanError) as err:
        world.check_plan([{"action": "move_to", "parameters": {"target": "moon"}}])
    assert err.value.reason == Fault.UNKNOWN_CHOICE
    with pytest.raises(PlanError) as err:
        world.check_plan([{"action": "wait", "parameters": {"seconds": 6}}])
    assert err.value.reason == Fault.OUT_OF_RANGE
    assert SCHEMA.check_plan([{"action": "wait", "parameters": {"seconds": 6}}])  # the base is untouched
    assert world.to_dict()["actions"]["move_to"]["target"] == {"type": "string", "choices": ["dock_1", "shelf_1"]}
    assert world.to_dict(resolve_entities=False)["entities"] == {"place": ["dock_1", "shelf_1"]}


def test_merged_merges_mappings_replaces_values_and_removes_none():
    assert merged({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 3, "c": None}, "d": [2]}) == {"a": {"b": 3}, "d": [2]}


@pytest.mark.parametrize("raw, words", [
    ({}, "actions"),
    ({"actions": {"a": {"p": {"type": "vector"}}}}, "vector"),
    ({"actions": {"a": {"p": {"entity": "room"}}}}, "room"),
    ({"actions": {"a": {"p": {"choices": ["1"], "entity": "x"}}}, "entities": {"x": []}}, "not both"),
    ({"actions": {"a": {"p": {"type": "string", "min": 1}}}}, "range"),
    ({"actions": {"a": {"p": {"type": "number", "min": 2, "max": 1}}}}, "min"),
    ({"actions": {"a": {"p": {"colour": "red"}}}}, "colour"),
    ({"actions": {"a": {}}, "kinds": {"arm": ["b"]}}, "kinds.arm"),
    ({"actions": {"a": {}}, "max_steps": 0}, "max_steps"),
    ({"actions": {"a": {}}, "max_steps": 2, "min_steps": 3}, "min_steps"),
    ({"actions": {"a": {}}, "steps": 2}, "steps"),
    ({"actions": {"a": {"p": {"type": "integer", "not_self": True}}}}, "not_self"),
    ({"actions": {"a": {"p": {"entity": "x", "not_self": "yes"}}}, "entities": {"x": []}}, "not_self"),
])
def test_a_bad_schema_is_refused_with_what_is_wrong(raw, words):
    with pytest.raises(ValueError, match=words):
        ActionSchema.from_dict(raw)


@pytest.mark.parametrize("text, words", [
    ('{"actions":{"go":{}},"entities":5}', "entities is a mapping"),
    ('{"actions":{"go":{}},"kinds":["go"]}', "kinds is a mapping"),
    ('{"actions":{"go":{}},"kinds":{"arm":"go"}}', "kinds.arm must be a list"),
    ('{"actions":{"go":{}},"kinds":{"arm":[["go"]]}}', "not actions"),
    ('{"actions":["go"]}', "actions is a mapping"),
    ('{"actions":{"go":[]}}', "parameters is a mapping"),
    ('{"actions":{"go":{"p":{"type":["string"]}}}}', "is not one of"),
    ('{"actions":{"go":{"p":{"choices":[{"a":1}]}}}}', "not a string"),
    ('{"actions":{"go":{"p":{"type":"number","choices":[1e999]}}}}', "not finite"),
    ('{"actions":{"go":{"p":{"entity":["x"]}}},"entities":{"x":["a"]}}', "not a kind"),
    ('{"actions":{"go":{}},"entities":{"x":[1]}}', "list of ids"),
    ('{"actions":{"go":{"p":{"required":"no"}}}}', "required"),
    ('{"actions":{"go\\n":{}}}', "name"),
    ('{"actions":{"go":{}},"max_steps":1000000}', "max_steps"),
    ('[' * 100_000, "nests deeper"),
    ('{"actions":{"go":{}}} ' + ' ' * 300_000, "characters"),
    ('{"actions":{"go":{"p":{"choices":' + str(list(range(5000))) + '}}}}', "items"),
])
def test_a_hostile_schema_on_the_graph_is_refused_never_raised_past(text, words):
    with pytest.raises(InvalidInput, match=words):
        ActionSchema.from_json(text)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["actions", "entities", "kinds", "max_steps", "min_steps", "go", "p",
                                                "type", "choices", "entity", "required", "min", "max", "not_self",
                                                "x"]) | st.text(max_size=4), inner, max_size=4),
                           max_leaves=24)


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES)
def test_any_json_value_makes_a_schema_or_a_value_error(raw):
    try:
        schema = ActionSchema.from_dict(raw)
    except ValueError:
        return
    schema.json_schema()
    schema.describe()


def test_a_schema_loads_from_yaml(tmp_path):
    path = tmp_path / "actions.yaml"
    path.write_text("max_steps: 2\nactions:\n  pick:\n    object: {type: string, enum: [apple, pear]}\n  stop: {}\n")
    schema = ActionSchema.load(path)
    assert schema.describe() == "pick(object), stop()" and schema.signature("pick") == "pick(object)"
    path.write_text("actions: [unclosed\n")
    with pytest.raises(ValueError, match="not YAML"):
        ActionSchema.load(path)


def test_message_pairs_are_bounds_checked_before_the_schema():
    assert SCHEMA.plan_from_pairs([("wait", "")]) == [Step("wait", {})]
    for pairs, reason in [([("move to", "{}")], "bad_action"), ([("wait", "[1]")], "bad_parameters_json"),
                          ([("grip", '{"force": 2}')], Fault.SKILL_NOT_FOR_KIND), ([("fly", "{")], Fault.UNKNOWN_SKILL)]:
        with pytest.raises(InvalidInput) as err:
            SCHEMA.plan_from_pairs(pairs, kind="mobile")
        assert err.value.reason == reason
    assert SCHEMA.plan_from_pairs([], allow_empty=True) == []
    assert len(SCHEMA.plan_from_pairs([("wait", "")] * 10, max_steps=10)) == 10
    assert step_from_message("pick", '{"object": "cup"}') == Step("pick", {"object": "cup"})


def test_a_caller_renames_a_reason_to_its_own_counter_key():
    err = PlanError(Fault.UNKNOWN_CHOICE, "x", 2, "target")
    renamed = err.renamed({Fault.UNKNOWN_CHOICE: "hallucinated_value"})
    assert renamed.reason == "hallucinated_value" and (renamed.index, renamed.key) == (2, "target")
    assert err.renamed({"other": "y"}) is err


def test_the_json_schema_describes_each_action_and_the_step_count():
    world = SCHEMA.extend({"entities": {"place": ["dock_1"]}, "min_steps": 2})
    plan = world.json_schema()["properties"]["plan"]
    assert (plan["minItems"], plan["maxItems"]) == (2, 3)
    assert world.json_schema(max_steps=1)["properties"]["plan"]["maxItems"] == 1
    move, grip, wait = plan["items"]["anyOf"]
    assert move["properties"]["action"] == {"const": "move_to"}
    params = move["properties"]["parameters"]
    assert params["required"] == ["target"] and params["additionalProperties"] is False
    assert params["properties"]["target"] == {"type": "string", "enum": ["dock_1"]}
    assert params["properties"]["speed"] == {"type": "number", "exclusiveMinimum": 0.0, "maximum": 2.0}
    assert grip["properties"]["parameters"]["properties"]["force"] == {"type": "integer", "minimum": 1.0,
                                                                       "maximum": 10.0}


YIELDING = ActionSchema.from_dict({"entities": {"drone": ["d0", "d1", "d2"]}, "actions": {
    "yield_to": {"agent": {"type": "string", "entity": "drone", "not_self": True}}, "land": {}}})


def test_a_not_self_parameter_refuses_the_agent_the_plan_is_for():
    plan = [{"action": "yield_to", "parameters": {"agent": "d0"}}]
    assert SCHEMA.names_self() is False and YIELDING.names_self() is True
    assert YIELDING.check_plan(plan) == YIELDING.check_plan(plan, agent="d1") == [Step("yield_to", {"agent": "d0"})]
    with pytest.raises(PlanError) as err:
        YIELDING.check_plan(plan, agent="d0")
    assert (err.value.reason, err.value.index, err.value.key) == (Fault.NAMES_SELF, 0, "agent")
    with pytest.raises(PlanError, match="names d0 itself"):
        YIELDING.plan_from_pairs([("land", ""), ("yield_to", '{"agent": "d0"}')], agent="d0")
    assert YIELDING.allows(Step("yield_to", {"agent": "d0"}), "d1") and YIELDING.allows(Step("land"), "d0")
    assert not YIELDING.allows(Step("yield_to", {"agent": "d0"}), "d0")
    assert YIELDING.to_dict(resolve_entities=False)["actions"]["yield_to"]["agent"]["not_self"] is True
    assert YIELDING.extend({}).names_self()  # survives extending, and the planner's copy with the ids as choices
    assert ActionSchema.from_dict(YIELDING.to_dict()).json_schema(agent="d2") == YIELDING.json_schema(agent="d2")


def test_the_json_schema_of_an_agents_plan_leaves_its_own_id_out():
    def actions(schema, agent):
        return {s["properties"]["action"]["const"]: s["properties"]["parameters"]["properties"]
                for s in schema.json_schema(agent=agent)["properties"]["plan"]["items"]["anyOf"]}
    assert actions(YIELDING, None)["yield_to"]["agent"]["enum"] == ["d0", "d1", "d2"]
    assert actions(YIELDING, "d1")["yield_to"]["agent"]["enum"] == ["d0", "d2"]
    alone = YIELDING.extend({"entities": {"drone": ["d0"]}})
    assert list(actions(alone, "d0")) == ["land"]  # no other drone to yield to: the action is left out


# ---------------------------------------------------------------------- properties

_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
                    st.lists(st.integers(), max_size=2))
_raw_steps = st.lists(st.one_of(
    _values,
    st.fixed_dictionaries({"action": st.sampled_from(["move_to", "grip", "wait", "fly", 3])},
                          optional={"parameters": st.one_of(_values, st.dictionaries(
                              st.sampled_from(["target", "speed", "force", "soft", "seconds", "yaw"]), _values,
                              max_size=3))})), max_size=5)


def _conforms(value, spec: dict) -> bool:
    """An independent reading of a parameter's JSON Schema."""
    kinds = {"string": str, "number": (int, float), "integer": int, "boolean": bool}[spec["type"]]
    if isinstance(value, bool) and spec["type"] != "boolean" or not isinstance(value, kinds):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if "enum" in spec and value not in spec["enum"]:
        return False
    if "minimum" in spec and value < spec["minimum"] or "maximum" in spec and value > spec["maximum"]:
        return False
    return "exclusiveMinimum" not in spec or value > spec["exclusiveMinimum"]


@settings(max_examples=300, deadline=None)
@given(_raw_steps)
@example([{"action": "wait", "parameters": False}])  # falsy non-objects are refused, not read as no parameters
def test_check_plan_accepts_exactly_what_the_json_schema_allows(raw):
    world = SCHEMA.extend({"entities": {"place": ["dock_1", "shelf_1"]}})
    schema = world.json_schema()["properties"]["plan"]
    by_action = {s["properties"]["action"]["const"]: s["properties"]["parameters"] for s in schema["items"]["anyOf"]}

    def allowed(step) -> bool:
        if not isinstance(step, dict) or step.get("action") not in by_action:
            return False
        params = step.get("parameters")
        params = {} if params is None else params  # absent or null: no parameters; any other non-object is refused
        spec = by_action[step["action"]]
        return (isinstance(params, dict) and set(params) <= set(spec["properties"])
                and set(spec["required"]) <= set(params)
                and all(_conforms(v, spec["properties"][k]) for k, v in params.items()))

    expected = schema["minItems"] <= len(raw) <= schema["maxItems"] and all(allowed(s) for s in raw)
    try:
        steps = world.check_plan(raw)
    except PlanError as exc:
        assert not expected, exc
        assert exc.reason in set(Fault)
        return
    assert expected
    assert [s.action for s in steps] == [r["action"] for r in raw]
    for step in steps:  # canonical: validating a step's own JSON gives the same step
        assert world.check(json.loads(json.dumps({"action": step.action, "parameters": step.parameters}))) == step


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=12), st.text(max_size=40)), max_size=5))
def test_message_pairs_raise_only_invalid_input(pairs):
    try:
        steps = SCHEMA.plan_from_pairs(pairs, allow_empty=True)
    except InvalidInput as exc:
        assert exc.reason
        return
    assert all(s.action in SCHEMA.actions for s in steps)
