"""Simulator bridges: the embedded multi-agent warehouse (default), AirSim and Isaac Sim adapters."""
