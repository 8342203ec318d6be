"""AirSim's settings.json as its clients read it (getSettingsString): each vehicle's spawn point, the ClockSpeed.

A vehicle's API frame is local to its spawn point (settings.json X, Y, Z, world NED); the bridge and the collision
monitor's proxy add the origin.
"""

from __future__ import annotations

import json
import math

Point = tuple[float, float, float]


def read_settings(settings_text: str) -> tuple[dict[str, Point], float]:
    """Each vehicle's spawn point (world NED) and the ClockSpeed from AirSim's settings JSON; ValueError naming
    what is wrong."""
    try:
        raw = json.loads(settings_text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"settings are not JSON: {exc}") from None
    vehicles = raw.get("Vehicles") if isinstance(raw, dict) else None
    if not isinstance(vehicles, dict) or not vehicles:
        raise ValueError("settings name no Vehicles")
    origins = {}
    for name, spec in vehicles.items():
        try:
            origins[name] = (float(spec.get("X", 0.0)), float(spec.get("Y", 0.0)), float(spec.get("Z", 0.0)))
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"vehicle {name}: X, Y, Z must be numbers") from None
    try:
        clock_speed = float(raw.get("ClockSpeed", 1.0))
    except (TypeError, ValueError):
        raise ValueError("ClockSpeed must be a number") from None
    if not math.isfinite(clock_speed) or clock_speed <= 0:
        raise ValueError(f"ClockSpeed {clock_speed} must be positive")
    return origins, clock_speed
