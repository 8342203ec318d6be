"""The AgileX PiPER arm: its node over piper_sdk, CAN frames, kinematics, safety limits, and its CAN-level twin."""
