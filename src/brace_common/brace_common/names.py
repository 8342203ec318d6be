"""Topic and action names of the stack, relative so launch can namespace a stack, a robot or a camera.

Nodes create their interfaces with these relative names; the stack's namespace
(DEFAULT_NAMESPACE unless launch says otherwise) makes them /brace/triggers,
/brace/replan, ... Two stacks (two robots) run side by side in two namespaces.
/diagnostics and /clock are global by ROS convention.
"""

DEFAULT_NAMESPACE = "/brace"
"""The namespace launch files and brace-run put the stack's nodes in."""

TRIGGERS = "triggers"                  # TriggerEvent: trigger monitor (or a bridge) -> controller
DECISIONS = "decisions"                # ReplanDecision: one per trigger, admitted or suppressed
PLAN = "plan"                          # Plan: every accepted plan, latched per agent
CONTEXT = "context"                    # ContextEntry: simulator / bridges -> planner
REPLAN = "replan"                      # Replan action: controller -> planner
REPLAN_CALLS = "replan_calls"          # ReplanCall: the audit record of every call
AGENT_STATES = "agent_states"          # AgentState: simulator / bridges -> trigger monitor
OUTCOMES = "outcomes"                  # ExecutionOutcome: executor / simulator -> trigger monitor
VERDICTS = "verdicts"                  # VerifierVerdict: a plan verifier -> trigger monitor
EPISODE = "episode"                    # Episode: episode boundaries (the only episode control signal)
WORLD_STATE = "world_state"            # WorldState: every world's entities, relations and agent activities
WORLD_INFO = "world_info"              # WorldInfo: the episode's agents and action schema (latched at its start)
LOOKAHEAD = "lookahead"                # Lookahead service: one step through a world's transition model
CONTROLLER_STATE = "controller_state"  # ControllerState: the gate's counters per agent
SERVER_LOAD = "server_load"            # ServerLoad: a planner server's requests, from its planner node
MARKERS = "markers"                    # visualization_msgs/MarkerArray for RViz
COLLISION_MONITOR_STATE = "collision_monitor_state"  # CollisionMonitorState: what the monitor did to an agent's motion
DIAGNOSTICS = "/diagnostics"           # diagnostic_msgs/DiagnosticArray (global)
CLOCK = "/clock"                       # rosgraph_msgs/Clock (global)

# Robot bridges (robot_bridge). An arm's and a camera's names are relative too: launch puts each
# robot in its namespace and each camera under its camera_name (OrbbecSDK_ROS2's layout).
JOINT_STATES = "joint_states"          # sensor_msgs/JointState: arm -> executor, RViz (joint1..6 rad, gripper m)
END_POSE = "end_pose"                  # geometry_msgs/PoseStamped: the arm's end-effector pose in base_link
EE_DELTA_CMD = "ee_delta_cmd"          # EndEffectorDelta: executor -> arm (one 7-D action)
JOINT_CMD = "joint_cmd"                # sensor_msgs/JointState: joint position command (rad) -> arm
GRIPPER_CMD = "gripper_cmd"            # std_msgs/Float64: gripper opening command (m) -> arm
COLOR_IMAGE = "color/image_raw"        # sensor_msgs/Image (rgb8), under <camera_name>/
COLOR_INFO = "color/camera_info"       # sensor_msgs/CameraInfo, under <camera_name>/
DEPTH_IMAGE = "depth/image_raw"        # sensor_msgs/Image (16UC1, mm), under <camera_name>/
DEPTH_INFO = "depth/camera_info"       # sensor_msgs/CameraInfo, under <camera_name>/

# Mobile robots (Isaac Sim's contract; Nav2's names): a robot's topics are in its namespace, /<robot>/cmd_vel.
CMD_VEL = "cmd_vel"                    # geometry_msgs/Twist: the motors' velocity command (after the collision monitor)
CMD_VEL_NAV = "cmd_vel_nav"            # geometry_msgs/Twist: the executor's velocity command, into the monitor
EE_DELTA_CMD_NAV = "ee_delta_cmd_nav"  # EndEffectorDelta: the executor's arm command, into the arm's collision monitor
ODOM = "odom"                          # nav_msgs/Odometry: a base's odometry
