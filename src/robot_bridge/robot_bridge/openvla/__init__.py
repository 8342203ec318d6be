"""The OpenVLA executor: skill steps to instructions, /act backends, end-effector actions, step monitoring."""
