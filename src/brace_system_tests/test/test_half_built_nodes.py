"""A node whose constructor a signal stopped half way is destroyed quietly when rclpy's context shuts down.

`ros2 launch` starts every process at once and a Ctrl-C can come while a node is still being built (its name is in
the graph before its constructor ends). rclpy's context then destroys the half-built node it tracks; a destroy_node
that touched an attribute not yet set raised there, and the process exited 1 with a traceback (found by
test_launch_stacks' textworld launch on a busy machine).
"""

from __future__ import annotations

import importlib

import pytest
import rclpy

from brace_common.domain_leases import fresh_domain

HALF_BUILT = [  # (module, node class, the first call after Node.__init__ the signal interrupts)
    ("sim_bridges.textworld.textworld_world_node", "TextWorldWorldNode", "declare_config"),
    ("robot_bridge.verifier.visual_verifier_node", "VisualVerifierNode", "declare_config"),
    ("robot_bridge.orbbec.orbbec_camera_node", "OrbbecCameraNode", "declare_parameters"),
]


@pytest.mark.parametrize(("module", "cls", "first_call"), HALF_BUILT, ids=[c for _, c, _ in HALF_BUILT])
def test_a_node_stopped_while_being_built_is_destroyed_without_an_error(module, cls, first_call, monkeypatch):
    mod = importlib.import_module(module)

    def signal_arrives(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, first_call, signal_arrives)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=fresh_domain())
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:  # its traceback keeps the half-built node alive, as in main
            getattr(mod, cls)(context=context)
        assert stopped.value is not None
    finally:
        context.try_shutdown()  # destroys the node it tracks: nothing may raise
