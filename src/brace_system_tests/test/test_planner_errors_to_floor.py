"""The planner's error text and the controller's quality floor speak one vocabulary.

The floor reads the reason at the head of a call record's error. A plan naming an entity the schema does not hold
must reach it as a lost-entity fault exactly as the planner writes it (the floor once keyed on the schema's name,
`unknown_choice`, while the planner reports `hallucinated_value`, and never rose in a run).
"""

from __future__ import annotations

import pytest

from brace_common.action_schema import ActionSchema
from brace_common.vocabulary import CallStatus
from brace_controller.quality_floor import LOST_ENTITY_FAULTS, QualityFloor, fault_of
from erecap_planner.call_path import CallOutcome, parse_into

SCHEMA = ActionSchema.from_dict({"max_steps": 4, "actions": {
    "move_to": {"target": {"choices": ["dock_1", "shelf_3"]}},
    "handoff": {"to_agent": {"choices": ["agent_0", "agent_1"]}}}})


def planner_error(text: str) -> str:
    """The error a planner call records for the plan `text`."""
    outcome = CallOutcome(status=CallStatus.OK)
    parse_into(outcome, text, SCHEMA)
    assert outcome.status == CallStatus.PLANNER_ERROR
    return outcome.error


@pytest.mark.parametrize("text", ['{"action": "move_to", "parameters": {"target": "dock_9"}}',
                                  '[{"action": "handoff", "parameters": {"to_agent": "agent7"}}]'])
def test_a_plan_naming_an_unknown_entity_raises_the_floor(text):
    error = planner_error(text)
    assert fault_of(error) in LOST_ENTITY_FAULTS, error
    floor = QualityFloor(128, step=64, ceiling=512, window=2, max_error_rate=0.25)
    assert floor.observe(140, fault_of(error)) is False and floor.observe(140, fault_of(error)) is True
    assert floor.floor == 192


def test_a_known_id_spelled_another_way_is_respelled_not_a_lost_entity():
    outcome = CallOutcome(status=CallStatus.OK)
    parse_into(outcome, '[{"action": "handoff", "parameters": {"to_agent": "agent1"}}]', SCHEMA)
    assert outcome.status == CallStatus.OK and outcome.steps[0].parameters == {"to_agent": "agent_1"}
    assert outcome.respelled == ["agent1 -> agent_1"]


@pytest.mark.parametrize("text", ["no plan at all", '{"action": "fly", "parameters": {}}',
                                  '{"action": "move_to", "parameters": {}}'])
def test_other_planner_errors_are_not_lost_entities(text):
    assert fault_of(planner_error(text)) not in LOST_ENTITY_FAULTS
