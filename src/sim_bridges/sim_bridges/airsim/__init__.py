"""The AirSim drone intersection: the scenario, drone world and feed, the bridge node, the RPC link and its peer."""
