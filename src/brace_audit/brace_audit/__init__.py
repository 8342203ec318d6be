"""The audit: the recorder's MCAP bag, brace-audit's report and replay, the paper's tables from the bags alone."""

from brace_common.startup import quiet_until_spinning

# A stop while one of the node executables still imports its modules: exit 0, no trace.
NODE_EXECUTABLES = ("audit_recorder",)
quiet_until_spinning("brace_audit", NODE_EXECUTABLES)
