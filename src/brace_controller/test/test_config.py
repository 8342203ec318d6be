"""Config validation: every bad value names its parameter; YAML files load like ROS parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory

from brace_common.config import ConfigError, config_from_file, from_mapping
from brace_common.vocabulary import Mode
from brace_controller.config import (
    ControllerConfig,
    ControllerNodeConfig,
    MonitorConfig,
    MonitorNodeConfig,
    default_profiles_path,
    load_profiles,
)

PARAMS = Path(get_package_share_directory("brace_bringup")) / "params"  # the stacks' parameter files


@pytest.mark.parametrize("field,value", [
    ("cooldown_steps", -1), ("commit_steps", -3), ("adaptive_guard_ratio", 0.0),
    ("override_budget_scale", 0.5), ("adaptive_tail_quantile", float("nan")), ("budget_profile", " "),
])
def test_invalid_controller_values_name_the_parameter(field, value):
    with pytest.raises(ConfigError) as err:
        from_mapping(ControllerConfig, {field: value})
    assert err.value.parameter == field and field in str(err.value)


@pytest.mark.parametrize("values,parameter", [
    ({"step_source": "wall"}, "step_source"), ({"agents": [""]}, "agents"), ({"agents": ["a", "a"]}, "agents"),
    ({"deadlock_window": 2, "deadlock_threshold": 3}, "deadlock_threshold"), ({"step_period_s": 0.0}, "step_period_s"),
])
def test_invalid_monitor_values(values, parameter):
    with pytest.raises(ConfigError) as err:
        from_mapping(MonitorConfig, values)
    assert err.value.parameter == parameter


def test_unknown_key_and_wrong_type_are_errors():
    with pytest.raises(ConfigError, match="cooldown_step'"):
        from_mapping(ControllerConfig, {"cooldown_step": 1})
    with pytest.raises(ConfigError, match="expected int"):
        from_mapping(ControllerConfig, {"cooldown_steps": "3"})


def test_shipped_profiles_load():
    profiles = load_profiles(default_profiles_path())
    assert {"default", "habitat", "robofactory", "airsim"} <= set(profiles)
    assert profiles["robofactory"].modes[Mode.FULL_REPLAN].slo_ms == 250.0  # paper Table 11


def test_unknown_profile_names_budget_profile():
    with pytest.raises(ConfigError) as err:
        ControllerConfig(budget_profile="nope").load_profile()
    assert err.value.parameter == "budget_profile" and "known:" in str(err.value)


@pytest.mark.parametrize("body,match", [
    ("profiles: {p: {modes: {full_replan: {token_budget: 10, slo_ms: 0}}}}", "lacks modes"),
    ("profiles:\n  p:\n    modes:\n" + "".join(
        f"      {m}: {{token_budget: 100, slo_ms: -5}}\n" for m in ("full_replan", "partial_replan", "reuse_subplan")),
     "slo_ms must be > 0"),
    ("profiles: [", "not valid YAML"),
    ("nothing: 1", "no 'profiles'"),
])
def test_malformed_profile_files(tmp_path, body, match):
    path = tmp_path / "profiles.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=match) as err:
        load_profiles(path)
    assert err.value.parameter == "budget_profiles_file"


def test_workspace_parameter_files_build_valid_configs():
    cfg = config_from_file(ControllerConfig, PARAMS / "brace_controller.yaml", "brace_controller",
                           ControllerNodeConfig)
    cfg.load_profile()
    config_from_file(MonitorConfig, PARAMS / "trigger_monitor.yaml", "trigger_monitor", MonitorNodeConfig)
