"""A minimal world on the world-node base: the template for a bridge to your own robot (docs/integrate.md)."""
