"""BRACE controller: the stability gate (Eq. 1), budget policy (Eq. 2), trigger
detectors and replanning metrics, plus the thin rclpy nodes around them."""
