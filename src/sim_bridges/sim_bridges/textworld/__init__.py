"""TextWorld cooking games on the world contract: made offline, played through textworld, one agent (the player)."""
