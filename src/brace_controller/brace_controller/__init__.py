"""BRACE controller: the stability gate (Eq. 1), budget policy (Eq. 2), trigger
detectors, plus the thin rclpy nodes around them (the audit of their records is brace_audit)."""

from brace_common.startup import quiet_until_spinning

# A stop while one of the node executables still imports its modules: exit 0, no trace.
NODE_EXECUTABLES = ("brace_controller", "trigger_monitor")
quiet_until_spinning("brace_controller", NODE_EXECUTABLES)
