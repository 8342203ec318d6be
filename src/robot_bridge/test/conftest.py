"""Test setup: the `ros` fixture, and `act`: real ActServers on 127.0.0.1 (the OpenVLA deploy protocol), stopped after."""

import pytest

from brace_common.testing import ros  # noqa: F401
from robot_bridge.openvla.act_server import ActServer


@pytest.fixture
def act():
    """start(policy) -> a running ActServer answering /act with `policy`; every one stopped after the test."""
    servers = []

    def start(policy):
        server = ActServer(policy).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
