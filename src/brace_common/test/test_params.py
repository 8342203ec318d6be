"""Parameters after every file and the command line are merged as rcl merges them: the value set last is the one in
force, or the node refuses to start naming the parameter and where the value came from."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.node import Node

from brace_common.config import ConfigError, param
from brace_common.params import declare_parameters, given_parameters, read_config

NODE_ARGS = ("--ros-args", "-r", "__ns:=/brace")


@dataclasses.dataclass
class ArmConfig:
    """A few parameters of each type, as a node's config declares them."""

    max_joint_step_rad: float = param(0.2, "largest joint change (rad)", 1e-4, 3.2)
    workspace_max_m: list[float] = param([0.6, 0.6, 0.7], "workspace box upper corner (m)")
    periodic_interval_steps: int = param(10, "steps between periodic triggers", 0, 10**6)
    agents: list[str] = param(["a", "b"], "agent ids")
    frame_id: str = param("base_link", "frame")
    autostart: bool = param(False, "configure at start")

    def validate(self) -> None:
        """Nothing beyond the types."""


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _section(key: str, body: str) -> str:
    return f"{key}:\n  ros__parameters:\n" + "".join(f"    {line}\n" for line in body.splitlines())


def _start(ros, args: list[str]) -> tuple[Node, list[str]]:
    """The node /brace/monitor started with `args` (ROS arguments) and its config declared."""
    argv = ["prog", *NODE_ARGS, *args]
    node = ros.add(Node("monitor", cli_args=argv[1:]))
    declare_parameters(node, ArmConfig, enforce_ranges=False)
    return node, argv


def _base(tmp_path) -> str:
    return _write(tmp_path / "base.yaml", _section("/**", "max_joint_step_rad: 0.2\nworkspace_max_m: [0.6, 0.6, 0.7]\n"
                                                          "periodic_interval_steps: 10\nagents: [a, b]\n"))


TYPE_CHANGES = [
    # (what the later file sets, the parameter, its type)
    ("max_joint_step_rad: '0.05'", "max_joint_step_rad", "a double"),  # rcl keeps the earlier 0.2 silently
    ("max_joint_step_rad: abc", "max_joint_step_rad", "a double"),
    ("max_joint_step_rad: 1", "max_joint_step_rad", "a double"),  # an integer: rclpy refuses it unnamed
    ("workspace_max_m: '[0.3, 0.3, 0.3]'", "workspace_max_m", "a list of doubles"),
    ("workspace_max_m: [1, 1, 1]", "workspace_max_m", "a list of doubles"),
    ("periodic_interval_steps: 2^70", "periodic_interval_steps", "an integer"),
    ("periodic_interval_steps: 1180591620717411303424", "periodic_interval_steps", "an integer"),  # beyond int64
    ("periodic_interval_steps: 2.5", "periodic_interval_steps", "an integer"),
    ("agents: arm_0", "agents", "a list of strings"),
    ("frame_id: 5", "frame_id", "a string"),
    ("autostart: 'true'", "autostart", "a bool"),
]


@pytest.mark.parametrize("section", ["/**", "/**/monitor", "/brace/*"])
@pytest.mark.parametrize("line,name,expected", TYPE_CHANGES)
def test_a_value_of_another_type_in_a_later_file_stops_the_node_naming_it_and_the_file(ros, tmp_path, line, name,
                                                                                      expected, section):
    site = _write(tmp_path / "site.yaml", _section(section, line))
    node, argv = _start(ros, ["--params-file", _base(tmp_path), "--params-file", site])
    with pytest.raises(ConfigError) as error:
        read_config(node, ArmConfig, argv)
    assert error.value.parameter == name
    assert site in str(error.value) and f") where {expected} is declared" in str(error.value), str(error.value)


@pytest.mark.parametrize("rule,name", [("max_joint_step_rad:='0.05'", "max_joint_step_rad"),
                                       ("periodic_interval_steps:=2^70", "periodic_interval_steps"),
                                       ("workspace_max_m:=\"[0.3, 0.3, 0.3]\"", "workspace_max_m")])
def test_a_value_of_another_type_on_the_command_line_stops_the_node_naming_it(ros, tmp_path, rule, name):
    node, argv = _start(ros, ["--params-file", _base(tmp_path), "-p", rule])
    with pytest.raises(ConfigError) as error:
        read_config(node, ArmConfig, argv)
    assert error.value.parameter == name and f"-p {rule}" in str(error.value), str(error.value)


def test_the_earlier_value_rcl_would_keep_is_named(ros, tmp_path):
    site = _write(tmp_path / "site.yaml", _section("/**", "max_joint_step_rad: '0.05'"))
    node, argv = _start(ros, ["--params-file", _base(tmp_path), "--params-file", site])
    with pytest.raises(ConfigError, match=r"drop it and keep 0\.2 from file '.*base\.yaml'"):
        read_config(node, ArmConfig, argv)


@pytest.mark.parametrize("later", [["--params-file", "SITE"], ["-p", "max_joint_step_rad:=0.05"]])
def test_a_later_value_rcl_would_lose_to_an_earlier_section_stops_the_node(ros, tmp_path, later):
    """rclpy applies sections in the order they first appeared: the base's node section, seen after its `/**`,
    beats a later `/**` value (a site file's, or `-p`'s)."""
    base = _write(tmp_path / "base.yaml", _section("/**", "agents: [a, b]") +
                  _section("/**/monitor", "max_joint_step_rad: 0.2"))
    site = _write(tmp_path / "site.yaml", _section("/**", "max_joint_step_rad: 0.05"))
    node, argv = _start(ros, ["--params-file", base, *[site if a == "SITE" else a for a in later]])
    with pytest.raises(ConfigError, match=r"sets 0\.05 but rcl keeps 0\.2 from file '.*base\.yaml': its section "
                                          r"'/\*\*/monitor' applies after '/\*\*'") as error:
        read_config(node, ArmConfig, argv)
    assert error.value.parameter == "max_joint_step_rad"


def test_values_of_the_declared_type_and_empty_lists_set_last_win(ros, tmp_path):
    site = _write(tmp_path / "site.yaml", _section("/**/monitor", "max_joint_step_rad: 0.05\nworkspace_max_m: "
                                                                    "[0.3, 0.3, 0.3]\nagents: []\n"
                                                                    "periodic_interval_steps: 0x10"))
    node, argv = _start(ros, ["--params-file", _base(tmp_path), "--params-file", site, "-p", "frame_id:=tool"])
    cfg = read_config(node, ArmConfig, argv)
    assert (cfg.max_joint_step_rad, cfg.workspace_max_m, cfg.agents) == (0.05, [0.3, 0.3, 0.3], [])
    assert (cfg.periodic_interval_steps, cfg.frame_id) == (16, "tool")


def test_an_empty_list_in_a_later_file_or_on_the_command_line_wins(ros, tmp_path):
    base = _write(tmp_path / "base.yaml", _section("/**", "agents: [a, b]\nworkspace_max_m: [0.5, 0.5, 0.5]"))
    overlay = _write(tmp_path / "overlay.yaml", _section("/**/monitor", "agents: []"))
    node, argv = _start(ros, ["--params-file", base, "--params-file", overlay, "-p", "workspace_max_m:=[]"])
    cfg = read_config(node, ArmConfig, argv)
    assert (cfg.agents, cfg.workspace_max_m) == ([], [])


def test_a_section_for_another_node_or_namespace_is_not_checked(ros, tmp_path):
    other = _write(tmp_path / "other.yaml", _section("/**/controller", "max_joint_step_rad: '0.05'") +
                   _section("/robot_1/*", "frame_id: 5") + _section("/monitor", "agents: x"))
    node, argv = _start(ros, ["--params-file", _base(tmp_path), "--params-file", other])
    assert read_config(node, ArmConfig, argv).max_joint_step_rad == 0.2


# ------------------------------------------------------------------ the replay agrees with rcl and rclpy

SCALARS = ["0.2", "'0.05'", "abc", "1", "-7", "+12", "0x1F", "010", "09", "2^70", "1180591620717411303424",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e3", "1.", ".5", "-.5e-2", ".inf",
           "-.Inf", ".nan", "nan", "inf", "1e999", "1_000", "yes", "Off", "y", "TRUE", "~", "null", "'true'", '"5"',
           "0x1p3", "1e", "1e-400", "0x10000000000000000"]


def test_scalars_are_typed_as_rcl_types_them(ros, tmp_path):
    path = _write(tmp_path / "scalars.yaml", _section("/**", "".join(f"p{i}: {v}\n" for i, v in enumerate(SCALARS))))
    node = ros.add(Node("scalars", cli_args=["--ros-args", "--params-file", path]))
    settings = given_parameters(["prog", "--ros-args", "--params-file", path], "/scalars")
    for i, text in enumerate(SCALARS):
        rcl, ours = node._parameter_overrides[f"p{i}"], settings[f"p{i}"].effective
        assert (ours.type, repr(ours.value)) == (rcl.type_, repr(rcl.value)), text


SECTIONS = ["/**", "/**/monitor", "/brace/monitor", "brace/monitor", "/brace/*", "/*/monitor", "/monitor", "/other/*"]
VALUES = ["0.2", "'0.05'", "3", "true", "[0.1, 0.2]", "[1, 2]", "[]", "[a]"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(st.tuples(st.sampled_from(SECTIONS), st.sampled_from(VALUES)), min_size=1,
                               max_size=3), min_size=1, max_size=3),
       rule=st.one_of(st.none(), st.sampled_from(VALUES)))
def test_the_replay_gives_what_rclpy_gets_for_any_stack_of_files(ros, tmp_path_factory, files, rule):
    folder = tmp_path_factory.mktemp("stack")
    args: list[str] = []
    for i, sections in enumerate(files):
        text = "".join(_section(key, f"x: {value}") for key, value in sections)
        args += ["--params-file", _write(folder / f"f{i}.yaml", text)]
    if rule is not None:
        args[:0] = ["-p", f"x:={rule}"]  # first: rcl parses the arguments in order, a later file over `-p`
    node = ros.add(Node("monitor", namespace="/brace", cli_args=["--ros-args", *args]))
    setting = given_parameters(["prog", "--ros-args", *args], "/brace/monitor").get("x")
    rcl = node._parameter_overrides.get("x")
    if setting is None or setting.effective is None:
        assert rcl is None or rcl.value is None, (files, rule)
    else:
        assert (setting.effective.type, setting.effective.value) == (rcl.type_, rcl.value), (files, rule)
