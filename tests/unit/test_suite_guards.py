"""The suite's own guards (pyproject.toml's pytest settings): no network but loopback, and a
deadline on every test. Each tier's configuration has a test like this one."""

from __future__ import annotations

import socket

import pytest
from pytest_socket import SocketConnectBlockedError


@pytest.mark.filterwarnings("ignore:A test tried to use socket")  # the blocked connect below
def test_only_loopback_is_reachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        # 0.0.0.0 reaches this machine too (so no packet leaves it were the guard off), but is not on the list
        with socket.socket() as outside, pytest.raises(SocketConnectBlockedError):
            outside.connect(("0.0.0.0", port))


def test_every_test_has_a_deadline(request: pytest.FixtureRequest) -> None:
    assert float(request.config.getini("timeout")) > 0
    assert request.config.getini("timeout_method") == "signal"
