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
CONTROLLER_STATE = "controller_state"  # ControllerState: the gate's counters per agent
MARKERS = "markers"                    # visualization_msgs/MarkerArray for RViz
DIAGNOSTICS = "/diagnostics"           # diagnostic_msgs/DiagnosticArray (global)
CLOCK = "/clock"                       # rosgraph_msgs/Clock (global)
