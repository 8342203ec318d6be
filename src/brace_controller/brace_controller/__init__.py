"""BRACE controller: the stability gate (Eq. 1), budget policy (Eq. 2), trigger
detectors, plus the thin rclpy nodes around them (the audit of their records is brace_audit)."""
