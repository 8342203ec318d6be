"""Preflight: checks of the real robot's CAN port, cameras and VLA server before a run."""
