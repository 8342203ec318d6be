"""The stacks: which nodes run, from which package and executable, with which parameter files.

One definition read through the run plan (brace_bringup.run_plan) by the
launch files (every node its own process), by brace-run (which composes the
same nodes in one process) and by the graph tests. Parameter files are named
relative to brace_bringup's installed params/ folder (run_config.params_dir),
in the order they apply.
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
    # "module:Class" that brace-run composes in one process (launch runs the executable). A string, not the class:
    # the launch files read this table in the launch process, which must not import every node's module (the
    # planner's loads torch, seconds); runner.compose imports it, and test_launch_files checks every one resolves.
    node_class: str = ""


@dataclass(frozen=True)
class Stack:
    """A set of nodes launched together, in one namespace."""

    name: str
    nodes: tuple[NodeSpec, ...]
    use_sim_time: bool = False  # every node follows /clock (a simulator in the stack publishes it)
    description: str = ""
    world: str = ""             # the node that runs the episodes (brace-run runs until it is done); "" = none

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


_MONITOR = "brace_controller.trigger_monitor_node:TriggerMonitorNode"
_PLANNER = "erecap_planner.planner_node:ErecapPlannerNode"
TRIGGER_MONITOR = NodeSpec("brace_controller", "trigger_monitor", "trigger_monitor", ("trigger_monitor.yaml",),
                           node_class=_MONITOR)
BRACE_CONTROLLER = NodeSpec("brace_controller", "brace_controller", "brace_controller", ("brace_controller.yaml",),
                            node_class="brace_controller.controller_node:BraceControllerNode")
ERECAP_PLANNER = NodeSpec("erecap_planner", "erecap_planner", "erecap_planner", ("erecap_planner.yaml",),
                          lifecycle=True, node_class=_PLANNER)
AUDIT_RECORDER = NodeSpec("brace_audit", "audit_recorder", "audit_recorder", ("audit_recorder.yaml",),
                          node_class="brace_audit.audit_recorder_node:AuditRecorderNode")
EMBEDDED_SIM = NodeSpec("sim_bridges", "embedded_sim", "embedded_sim", ("embedded_sim.yaml",),
                        node_class="sim_bridges.warehouse.embedded_sim_node:EmbeddedSimNode")
ERECAP_PLANNER_SIM = NodeSpec("erecap_planner", "erecap_planner", "erecap_planner",
                              ("erecap_planner.yaml", "erecap_planner_sim.yaml"), lifecycle=True, node_class=_PLANNER)

CONTROL = Stack("control", (TRIGGER_MONITOR, BRACE_CONTROLLER, ERECAP_PLANNER, AUDIT_RECORDER),
                description="trigger monitor, controller, planner and audit bag for a robot or an external "
                            "simulator (its bridge is launched separately)")
# The sim stack stamps with system time although its simulator publishes /clock: with an active /clock, rclpy's
# multi-threaded executor in the planner process wakes thousands of times a second with nothing ready and starves the
# call of the GIL (a tiny-model prefill of milliseconds took seconds; docs/nodes.md). Every node honours use_sim_time when set.
SIM = Stack("sim", (EMBEDDED_SIM, TRIGGER_MONITOR, BRACE_CONTROLLER, ERECAP_PLANNER_SIM, AUDIT_RECORDER),
            use_sim_time=False, description="the closed loop on the embedded warehouse", world="embedded_sim")

# The real-robot graph: the PiPER arm node, Orbbec cameras, the OpenVLA executor and the control stack
# with the robot's settings (params/robot/control.yaml) and the visual verifier beside the executor. Without hardware
# (piper_twin) the arm runs on the CAN twin, the twin world renders the front camera from the twin's state and runs
# PickFruit episodes, and the executor asks the twin's /act stand-in.
TWIN_WORLD = NodeSpec("robot_bridge", "twin_world", "twin_world", ("twin_world.yaml",),
                      node_class="robot_bridge.pickfruit.twin_world_node:TwinWorldNode")
PIPER_ARM = NodeSpec("robot_bridge", "piper_arm", "piper_arm", ("piper_arm.yaml",), lifecycle=True,
                     node_class="robot_bridge.piper.piper_arm_node:PiperArmNode")
_CAMERA = "robot_bridge.orbbec.orbbec_camera_node:OrbbecCameraNode"
FRONT_CAMERA = NodeSpec("robot_bridge", "orbbec_camera", "front_camera", ("orbbec_camera.yaml",), lifecycle=True,
                        node_class=_CAMERA)
OPENVLA_EXECUTOR = NodeSpec("robot_bridge", "openvla_executor", "openvla_executor", ("openvla_executor.yaml",),
                            lifecycle=True, node_class="robot_bridge.openvla.openvla_executor_node:OpenVlaExecutorNode")
VISUAL_VERIFIER = NodeSpec("robot_bridge", "visual_verifier", "visual_verifier", ("visual_verifier.yaml",),
                           node_class="robot_bridge.verifier.visual_verifier_node:VisualVerifierNode")
# Every end-effector command of the executor passes the arm's collision monitor (brace_safety, docs/safety.md): the
# executor sends ee_delta_cmd_nav, the monitor ee_delta_cmd to the arm.
EE_MONITOR = NodeSpec("brace_safety", "ee_monitor", "ee_monitor", ("ee_monitor.yaml",), lifecycle=True,
                      node_class="brace_safety.ee_monitor_node:EeMonitorNode")


def control_nodes(settings: str) -> tuple[NodeSpec, ...]:
    """The trigger monitor, controller and planner with a world's `settings` file loaded after their own, and the
    audit recorder."""
    return (*(NodeSpec(s.package, s.executable, s.name, (*s.parameter_files, settings), s.lifecycle, s.node_class)
              for s in (TRIGGER_MONITOR, BRACE_CONTROLLER, ERECAP_PLANNER)), AUDIT_RECORDER)


ROBOT_CONTROL = control_nodes("robot/control.yaml")
PIPER_TWIN = Stack("piper_twin", (TWIN_WORLD, PIPER_ARM, EE_MONITOR, OPENVLA_EXECUTOR, VISUAL_VERIFIER, *ROBOT_CONTROL),
                   description="the real-robot graph on the PiPER CAN twin (PickFruit with grasp slips, the front "
                               "camera rendered from the twin, the visual verifier)",
                   world="twin_world")
WRIST_CAMERA = NodeSpec("robot_bridge", "orbbec_camera", "wrist_camera", ("orbbec_camera.yaml",), lifecycle=True,
                        node_class=_CAMERA)
OPERATOR_TASK = NodeSpec("robot_bridge", "operator_task", "operator_task", ("operator_task.yaml",),
                         node_class="robot_bridge.pickfruit.operator_task_node:OperatorTaskNode")
_REAL = "robot/piper_real.yaml"  # the robot's CAN port, camera serials, VLA server (checked by robot_preflight)
PIPER_REAL = Stack("piper_real", tuple(
    NodeSpec(s.package, s.executable, s.name, (*s.parameter_files, _REAL), s.lifecycle, s.node_class)
    if s.name in ("piper_arm", "front_camera", "wrist_camera", "openvla_executor", "visual_verifier", "erecap_planner",
                  "operator_task")
    else s
    for s in (OPERATOR_TASK, PIPER_ARM, EE_MONITOR, FRONT_CAMERA, WRIST_CAMERA, OPENVLA_EXECUTOR, VISUAL_VERIFIER,
              *ROBOT_CONTROL)),
                   description="the real AgileX PiPER arm, two Orbbec cameras, the OpenVLA executor, the visual "
                               "verifier and the control stack (docs/robot.md)")
# The AirSim drone intersection: the bridge flies K drones in AirSim (or brace-airsim-peer, its
# protocol-level stand-in) through its RPC API; the control stack with the drones' settings (params/airsim/).
AIRSIM_BRIDGE = NodeSpec("sim_bridges", "airsim_bridge", "airsim_bridge", ("airsim_bridge.yaml",), lifecycle=True,
                         node_class="sim_bridges.airsim.airsim_bridge_node:AirSimBridgeNode")
# The bridge's RPC calls pass the collision monitor's proxy (brace_safety, docs/safety.md) on their way to AirSim.
AIRSIM_MONITOR = NodeSpec("brace_safety", "airsim_monitor", "airsim_monitor", ("airsim/airsim_monitor.yaml",),
                          lifecycle=True, node_class="brace_safety.airsim_monitor_node:AirSimMonitorNode")
AIRSIM = Stack("airsim", (AIRSIM_BRIDGE, AIRSIM_MONITOR, *control_nodes("airsim/control.yaml")),
               use_sim_time=False, description="the K-drone intersection in AirSim or its protocol-level peer",
               world="airsim_bridge")
# Isaac Sim (docs/isaac_sim.md): the bridge drives robots in a running Isaac Sim through the topics of its ROS 2
# bridge (odom, joint_states, camera in; cmd_vel, joint_command out); the control stack with the Isaac robots'
# settings (params/isaac/control.yaml). Every node follows Isaac's /clock.
ISAAC_BRIDGE = NodeSpec("sim_bridges", "isaac_bridge", "isaac_bridge", ("isaac_bridge.yaml",), lifecycle=True,
                        node_class="sim_bridges.isaac.isaac_bridge_node:IsaacBridgeNode")
# Every base's velocity command passes the collision monitor (brace_safety, docs/safety.md): the bridge sends
# /<robot>/cmd_vel_nav, the monitor /<robot>/cmd_vel (Nav2's layout).
ISAAC_MONITOR = NodeSpec("brace_safety", "cmd_vel_monitor", "cmd_vel_monitor", ("isaac/cmd_vel_monitor.yaml",),
                         lifecycle=True, node_class="brace_safety.cmd_vel_monitor_node:CollisionMonitorNode")
ISAAC = Stack("isaac", (ISAAC_BRIDGE, ISAAC_MONITOR, *control_nodes("isaac/control.yaml")),
              use_sim_time=True, description="robots in a running Isaac Sim through its ROS 2 bridge's topics",
              world="isaac_bridge")
# TextWorld cooking games (docs/textworld.md): the player's commands are the plan's steps; the control stack with the
# games' settings (params/textworld/control.yaml). The node makes its games offline into its game_dir.
TEXTWORLD_WORLD = NodeSpec("sim_bridges", "textworld_world", "textworld_world", ("textworld_world.yaml",),
                           node_class="sim_bridges.textworld.textworld_world_node:TextWorldWorldNode")
TEXTWORLD = Stack("textworld", (TEXTWORLD_WORLD, *control_nodes("textworld/control.yaml")),
                  description="TextWorld cooking games, generated offline and played through textworld",
                  world="textworld_world")
STACKS = {stack.name: stack for stack in (CONTROL, SIM, PIPER_TWIN, PIPER_REAL, AIRSIM, ISAAC, TEXTWORLD)}

# The hostile planner (brace_safety, docs/safety.md) serves Replan in the E-RECAP planner's place: valid plans at
# random or aimed at the nearest other agent, to test and measure the collision monitor. A variant that gives it
# parameters runs it instead of the planner.
HOSTILE_PLANNER = NodeSpec("brace_safety", "hostile_planner", "hostile_planner", ("hostile_planner.yaml",),
                           node_class="brace_safety.hostile_planner_node:HostilePlannerNode")
STAND_INS = {HOSTILE_PLANNER.name: (ERECAP_PLANNER.name, HOSTILE_PLANNER)}
"""Nodes a run's variant may start in another's place: name -> (the node it replaces, its spec)."""


# The live viewer (brace_audit, docs/viewer.md): Rerun's web viewer on 127.0.0.1, beside any stack when asked
# (`viewer:=true`, `brace-run --view`).
VIEWER = NodeSpec("brace_audit", "brace_viewer", "brace_viewer", ("brace_viewer.yaml",), lifecycle=True,
                  node_class="brace_audit.viewer_node:ViewerNode")
# The template world (docs/integrate.md): in no stack; a bridge of your own starts beside brace_control.launch.py.
EXAMPLE_WORLD = NodeSpec("brace_example_world", "corridor_world", "corridor_world", ("corridor_world.yaml",),
                         node_class="brace_example_world.corridor_node:CorridorWorldNode")


def with_viewer(stack: Stack) -> Stack:
    """`stack` with the live viewer beside its nodes (the stack itself when it has one)."""
    if VIEWER.name in stack.names:
        return stack
    return Stack(stack.name, (*stack.nodes, VIEWER), stack.use_sim_time, stack.description, stack.world)


def with_stand_ins(stack: Stack, names: set[str]) -> Stack:
    """`stack` with each stand-in of `names` in the place of the node it replaces (the stack itself when none)."""
    replaced = {STAND_INS[n][0]: STAND_INS[n][1] for n in names if n in STAND_INS and STAND_INS[n][0] in stack.names}
    if not replaced:
        return stack
    return Stack(stack.name, tuple(replaced.get(spec.name, spec) for spec in stack.nodes), stack.use_sim_time,
                 stack.description, stack.world)
