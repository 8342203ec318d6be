"""The stacks: which nodes run, from which package and executable, with which parameter files.

One definition read by the launch files (`launch/*.launch.py` build their
Node actions from it), by brace-run (which composes the same nodes in one
process) and by the graph test (which starts every executable as its own
process, all at once). Parameter files are named relative to the
workspace's config/ folder, in the order they apply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeSpec:
    """One node of a stack as launch starts it."""

    package: str
    executable: str
    name: str
    parameter_files: tuple[str, ...]
    lifecycle: bool = False  # a lifecycle node (configures and activates itself with its `autostart` parameter)


@dataclass(frozen=True)
class Stack:
    """A set of nodes launched together, in one namespace."""

    name: str
    nodes: tuple[NodeSpec, ...]
    use_sim_time: bool = False  # every node follows /clock (a simulator in the stack publishes it)
    description: str = ""

    def node(self, name: str) -> NodeSpec:
        """The node called `name`; KeyError when the stack has none."""
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(f"stack '{self.name}' has no node '{name}'")

    @property
    def names(self) -> tuple[str, ...]:
        """The node names, in launch order."""
        return tuple(spec.name for spec in self.nodes)


TRIGGER_MONITOR = NodeSpec("brace_controller", "trigger_monitor", "trigger_monitor", ("trigger_monitor.yaml",))
BRACE_CONTROLLER = NodeSpec("brace_controller", "brace_controller", "brace_controller", ("brace_controller.yaml",))
ERECAP_PLANNER = NodeSpec("erecap_planner", "erecap_planner", "erecap_planner", ("erecap_planner.yaml",),
                          lifecycle=True)
AUDIT_RECORDER = NodeSpec("brace_controller", "audit_recorder", "audit_recorder", ("audit_recorder.yaml",))
EMBEDDED_SIM = NodeSpec("sim_bridges", "embedded_sim", "embedded_sim", ("embedded_sim.yaml",))
ERECAP_PLANNER_SIM = NodeSpec("erecap_planner", "erecap_planner", "erecap_planner",
                              ("erecap_planner.yaml", "erecap_planner_sim.yaml"), lifecycle=True)

CONTROL = Stack("control", (TRIGGER_MONITOR, BRACE_CONTROLLER, ERECAP_PLANNER, AUDIT_RECORDER),
                description="trigger monitor, controller, planner and audit bag for a robot or an external "
                            "simulator (its bridge is launched separately)")
# The sim stack stamps with system time although its simulator publishes /clock: with an active /clock, rclpy's
# multi-threaded executor in the planner process wakes thousands of times a second with nothing ready and starves the
# call of the GIL (a 12 ms tiny-model prefill took seconds; docs/nodes.md). Every node honours use_sim_time when set.
SIM = Stack("sim", (EMBEDDED_SIM, TRIGGER_MONITOR, BRACE_CONTROLLER, ERECAP_PLANNER_SIM, AUDIT_RECORDER),
            use_sim_time=False, description="the closed loop on the embedded warehouse")
STACKS = {stack.name: stack for stack in (CONTROL, SIM)}
