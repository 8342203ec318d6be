"""brace_viewer over real DDS: what the stack publishes reaches the live recording (the node also saves it, read back
here), the viewer is served on 127.0.0.1 only, and bad parameters or a taken port stop configure naming why."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from brace_msgs.msg import ReplanCall, WorldState
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from view_samples import call, column, listening_addresses, read_rrd, state_msg, warehouse

from brace_audit.viewer_node import ViewerNode
from brace_common import names, qos
from brace_common.local_http import free_port
from brace_common.testing import wait_for

NS = "/viewer_test"
SUCCESS = TransitionCallbackReturn.SUCCESS


def viewer(**params) -> ViewerNode:
    params.setdefault("port", free_port())
    params.setdefault("grpc_port", free_port())
    params.setdefault("autostart", False)
    return ViewerNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_what_the_stack_publishes_is_shown_live(ros, tmp_path):
    saved = tmp_path / "live.rrd"
    node = ros.add(viewer(save_path=str(saved)))
    assert node.trigger_configure() == SUCCESS, node.last_error
    assert node.trigger_activate() == SUCCESS
    web = node.config.port
    assert listening_addresses(web) == {"127.0.0.1"}
    with urllib.request.urlopen(f"http://127.0.0.1:{web}/", timeout=10) as page:   # the viewer's page is served
        assert page.status == 200 and b"the_canvas_id" in page.read()
    stack = ros.add(Node("stack", namespace=NS))
    states = stack.create_publisher(WorldState, names.WORLD_STATE, qos.WORLD_STATE)
    calls = stack.create_publisher(ReplanCall, names.REPLAN_CALLS, qos.EVENTS)
    wait_for(lambda: states.get_subscription_count() > 0 and calls.get_subscription_count() > 0, what="discovery")
    states.publish(state_msg(warehouse(3)))
    calls.publish(call(latency=2500.0))
    wait_for(lambda: node.mapping.shown == 2, what="both messages shown")
    bad = state_msg(warehouse(4))
    bad.entities[1].id = "agent_0"
    states.publish(bad)
    wait_for(lambda: node.mapping.counts[f"rejected.{names.WORLD_STATE}"] == 1, what="the malformed state counted")
    assert node.trigger_deactivate() == SUCCESS and node.trigger_cleanup() == SUCCESS
    assert node.server is None and node.url == ""
    rows = read_rrd(saved)
    assert column(rows["/latency/agent_0"], "scalars") == [2500.0]
    assert column(rows["/world/robot/agent_0"], "step") == [3]


def test_nothing_is_shown_while_inactive(ros):
    node = ros.add(viewer())
    assert node.trigger_configure() == SUCCESS, node.last_error
    node.on_message(names.REPLAN_CALLS, call())
    assert node.mapping.shown == 0
    assert node.trigger_cleanup() == SUCCESS


@pytest.mark.parametrize("params, parameter", [
    ({"bind": "localhost"}, "bind"),
    ({"save_path": "/tmp/recording.txt"}, "save_path"),
    ({"port": 9000, "grpc_port": 9000}, "grpc_port"),
    ({"port": 0}, "port"),
])
def test_invalid_parameters_fail_configure_naming_the_parameter(ros, params, parameter):
    node = ros.add(viewer(**params))
    assert node.trigger_configure() != SUCCESS
    assert f"parameter '{parameter}'" in node.last_error and node.server is None


def test_a_taken_port_fails_configure_and_says_so(ros):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = ros.add(viewer(port=port))
        assert node.trigger_configure() != SUCCESS
    assert f"is port {port}" in node.last_error and node.server is None
