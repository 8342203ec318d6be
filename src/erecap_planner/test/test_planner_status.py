"""The planner's /diagnostics status merged from its state, its config and what each owner reports."""

from __future__ import annotations

from brace_common.counters import Health
from erecap_planner.config import PlannerConfig
from erecap_planner.planner_status import planner_health, reported


class Owner:
    """Something that reports one value."""

    def __init__(self, key: str, value: int) -> None:
        self.key, self.value = key, value

    def health(self) -> Health:
        return Health({self.key: self.value})


def test_before_configure_every_setting_is_empty_and_nothing_is_an_error():
    health = planner_health("unconfigured", None, "", "", [])
    assert health.values == {"state": "unconfigured", "model": "", "action_schema": "", "compressor": ""}
    assert not health.errors and not health.warnings


def test_a_failed_configure_is_an_error_and_the_settings_are_the_configs():
    cfg = PlannerConfig(model_path="tiny", compressor="recency", action_schema_file="schema.yaml")
    health = planner_health("unconfigured", cfg, "", "'model_path': no such folder", [])
    assert (health.values["model"], health.values["compressor"], health.values["action_schema"]) == \
        ("tiny", "recency", "schema.yaml")
    assert health.errors == ("configure failed: 'model_path': no such folder",)


def test_a_schema_from_the_world_is_named_by_its_worldinfo_and_owners_are_merged():
    cfg = PlannerConfig(action_schema_file="")
    assert planner_health("active", cfg, "", "", []).values["action_schema"] == "none yet"
    owners = reported(Owner("calls", 3), None, Owner("lookahead.answered", 1))  # None: an owner this config has not
    health = planner_health("active", cfg, "tiny episode 4", "", [*owners, Health(warnings=("slow",))])
    assert health.values["action_schema"] == "tiny episode 4"
    assert (health.values["calls"], health.values["lookahead.answered"], health.warnings) == (3, 1, ("slow",))
