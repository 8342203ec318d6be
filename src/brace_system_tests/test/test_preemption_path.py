"""OmniAct's preemption over DDS, frames in, halt and replan out.

The test node plays the arm and its front camera at the topic level: it applies the executor's end-effector steps
to a PickFruit world (whose hand takes the task's fruit away as the tool approaches) and publishes joint_states,
end_pose and the camera rendered from the world (colour, depth, camera_info: the twin's renderer and calibration).
The real nodes: openvla_executor (asking an ActServer with the twin's stand-in policy), visual_verifier, the trigger
monitor, the BRACE controller and the E-RECAP planner on a scripted OpenAI-protocol server (the LLM's edge) with
reflective memory.

Expected: the verifier sees the fruit gone and publishes a violation; the executor halts the pick (FAILURE_PREEMPTED,
the arm told to hold); the monitor raises PREEMPT; the controller admits it as a full replan; the planner's prompt
holds the verifier's trace of the contradiction; its plan reaches the executor; reflective memory keeps a preemption record.
"""

from __future__ import annotations

import json
import math
import threading

from brace_msgs.msg import EndEffectorDelta, ExecutionOutcome, Plan, PlanStep, ReplanDecision, TriggerEvent, VerifierVerdict
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from brace_common import names, qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_controller.controller_node import BraceControllerNode
from brace_controller.trigger_monitor_node import TriggerMonitorNode
from brace_memory.records import RecordKind
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.planner_node import ErecapPlannerNode
from erecap_planner.testing import saved_tiny_llama
from robot_bridge.openvla.act_server import ActServer
from robot_bridge.openvla.openvla_executor_node import OpenVlaExecutorNode
from robot_bridge.orbbec.calibration import load_calibration
from robot_bridge.pickfruit.camera_publisher import TwinCamera
from robot_bridge.pickfruit.pickfruit_rollout import HOME_TOOL
from robot_bridge.pickfruit.pickfruit_world import PickFruitConfig, PickFruitWorld, PolicyConfig, TwinPolicy
from robot_bridge.pickfruit.twin_camera import pickfruit_scene
from robot_bridge.verifier.visual_verifier_node import VisualVerifierNode

CALIBRATION = "package://robot_bridge/config/twin_front_camera.yaml"


class Rig(Node):
    """The arm and the front camera at the topic level, over a PickFruit world."""

    def __init__(self, world: PickFruitWorld) -> None:
        super().__init__("rig", namespace=NS)
        self.world = world
        self.tool = HOME_TOOL
        self.opening = 0.07
        self.commands: list[EndEffectorDelta] = []
        self.lock = threading.Lock()
        self.camera = TwinCamera(self, "front_camera", load_calibration(CALIBRATION))
        self.joints_pub = self.create_publisher(JointState, names.JOINT_STATES, qos.STATE)
        self.pose_pub = self.create_publisher(PoseStamped, names.END_POSE, qos.STATE)
        self.create_subscription(EndEffectorDelta, names.EE_DELTA_CMD, self.on_command, qos.INPUTS)
        self.create_timer(0.1, self.publish)

    def on_command(self, msg: EndEffectorDelta) -> None:
        with self.lock:
            self.commands.append(msg)
            t = msg.translation
            self.tool = (self.tool[0] + t.x, self.tool[1] + t.y, self.tool[2] + t.z)
            commanded = self.opening if math.isnan(msg.gripper) else msg.gripper
            width = self.world.grasp(self.tool, commanded)
            self.opening = commanded if width is None or commanded > width else width

    def publish(self) -> None:
        with self.lock:
            tool, opening = self.tool, self.opening
        self.joints_pub.publish(JointState(name=[f"joint{i}" for i in range(1, 7)] + ["gripper"],
                                           position=[0.0] * 6 + [opening]))
        pose = PoseStamped()
        pose.header.frame_id = "base_link"
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = tool
        self.pose_pub.publish(pose)
        self.camera.publish(pickfruit_scene(self.world, tool, opening))


class Watcher(Node):
    """The stack's verdicts, outcomes, triggers, decisions and plans."""

    def __init__(self) -> None:
        super().__init__("watcher", namespace=NS)
        self.verdicts: list[VerifierVerdict] = []
        self.outcomes: list[ExecutionOutcome] = []
        self.triggers: list[TriggerEvent] = []
        self.decisions: list[ReplanDecision] = []
        self.create_subscription(VerifierVerdict, names.VERDICTS, self.verdicts.append, qos.EVENTS)
        self.create_subscription(ExecutionOutcome, names.OUTCOMES, self.outcomes.append, qos.EVENTS)
        self.create_subscription(TriggerEvent, names.TRIGGERS, self.triggers.append, qos.EVENTS)
        self.create_subscription(ReplanDecision, "decisions", self.decisions.append, qos.EVENTS)
        self.plan_pub = self.create_publisher(Plan, names.PLAN, qos.PLANS)


def node(cls, **params):
    return cls(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_a_hand_taking_the_fruit_halts_the_pick_and_a_replan_follows(ros, tmp_path):
    # the hand reaches in early in the approach, the policy moves 5 mm per action: the verifier sees the fruit gone
    # long before the gripper could close on its empty spot
    world = PickFruitWorld(PickFruitConfig(hand_probability=1.0, hand_reach_m=0.2, hand_visible_s=0.3,
                                           slip_probability=0.0))
    fruit = world.reset(1)[0]
    other = next(f for f in world.fruits if f != fruit)
    rig = Rig(world)
    act = ActServer(TwinPolicy(world, tool=lambda: rig.tool, config=PolicyConfig(max_step_m=0.005))).start()
    replan = {"plan": [{"action": "pick", "parameters": {"object": other}},
                       {"action": "place", "parameters": {"object": other, "target": "bowl"}}]}
    try:
        with FaultServer(text=json.dumps(replan)) as server:
            server.script.clear()
            model = saved_tiny_llama(tmp_path / "tiny_llama")
            planner = node(ErecapPlannerNode, model_path=model, backend="openai", server_url=server.base_url,
                           compressor="none", endpoint="completions", structured_output="json_schema",
                           memory_modules=["reflective"], memory_share=0.3,
                           action_schema_file="package://robot_bridge/config/pickfruit_actions.yaml")
            planner.trigger_configure()
            assert planner.call_path is not None, planner.last_error
            planner.trigger_activate()
            executor = node(OpenVlaExecutorNode, server_url=f"{act.url}", control_period_s=0.1, image_size=0,
                            locations=["bowl=0.25,0.12,0.12"], stale_after_s=30.0)
            executor.trigger_configure()
            executor.trigger_activate()
            watcher = ros.add(Watcher())
            ros.add(rig)
            ros.add(executor)
            ros.add(planner)
            verifier = ros.add(node(VisualVerifierNode))
            ros.add(node(TriggerMonitorNode, agents=["arm_0"], step_source="timer", step_period_s=0.2,
                         periodic_interval_steps=0, plan_done_idle_steps=0, failure_threshold=1, drift_steps=0,
                         hazard_distance_m=0.0, deadlock_window=0, wait_for_episode=False))
            ros.add(node(BraceControllerNode, cooldown_steps=1, commit_steps=0))
            wait_for(lambda: verifier.verifier.counts["frames"] > 0 and executor.image is not None
                     and executor.ee_xyz is not None and watcher.plan_pub.get_subscription_count() >= 2,
                     timeout=60, what="frames compared and the executor's inputs")
            watcher.plan_pub.publish(Plan(plan_id="p1", agent_id="arm_0", steps=[
                PlanStep(index=0, action="pick", parameters_json=json.dumps({"object": fruit})),
                PlanStep(index=1, action="place", parameters_json=json.dumps({"object": fruit, "target": "bowl"}))]))

            wait_for(lambda: any(v.violation for v in watcher.verdicts), timeout=60, what="the verifier's violation")
            verdict = next(v for v in watcher.verdicts if v.violation)
            assert verdict.agent_id == "arm_0" and verdict.action == f"pick(object={fruit})"
            assert f"{fruit} removed" in verdict.detail and not verdict.action_context_used
            assert any(m.startswith(f"{fruit}: from table") for m in verdict.objects_moved_or_removed)
            wait_for(lambda: any(o.failure == ExecutionOutcome.FAILURE_PREEMPTED for o in watcher.outcomes),
                     timeout=30, what="the executor's halt")
            halted = next(o for o in watcher.outcomes if o.failure == ExecutionOutcome.FAILURE_PREEMPTED)
            assert halted.action == "pick" and f"{fruit} removed" in halted.detail
            assert all(o.failure != ExecutionOutcome.FAILURE_GRASP for o in watcher.outcomes)
            wait_for(lambda: any(math.isnan(c.gripper) and c.translation.x == 0.0 for c in rig.commands),
                     what="the hold")

            wait_for(lambda: any(t.kind == TriggerEvent.KIND_PREEMPT for t in watcher.triggers), timeout=30,
                     what="the preempt trigger")
            preempt = next(t for t in watcher.triggers if t.kind == TriggerEvent.KIND_PREEMPT)
            assert not any(t.kind == TriggerEvent.KIND_FAILURE for t in watcher.triggers), \
                "the halted step raises no failure trigger of its own"
            wait_for(lambda: any(d.trigger.trigger_id == preempt.trigger_id for d in watcher.decisions), timeout=30,
                     what="the controller's decision")
            decision = next(d for d in watcher.decisions if d.trigger.trigger_id == preempt.trigger_id)
            assert decision.admitted and decision.mode == ReplanDecision.MODE_FULL_REPLAN, decision
            wait_for(lambda: server.requests, timeout=60, what="the replan's request")
            prompt = server.requests[0]["body"].get("prompt", "")
            assert f"visual verifier: pick(object={fruit}) contradicted: {fruit} removed" in prompt, prompt
            wait_for(lambda: executor.plan_id not in ("", "p1"), timeout=60, what="the new plan at the executor")
            assert [s.action for s in executor.steps] == ["pick", "place"]
            assert executor.steps[0].parameters == {"object": other}
            records = planner.memory().store.records("arm_0", RecordKind.FAILURE)
            assert any(r.fields["failure_kind"] == "preemption" and r.fields["skill"] == "pick" for r in records)
    finally:
        act.stop()
