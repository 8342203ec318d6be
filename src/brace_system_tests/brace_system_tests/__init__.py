"""Tests of the whole graph: helpers that start several packages' nodes together, and the fuzz harness."""
