"""The suite's guards (see pyproject): sockets disabled except on loopback (pytest-socket), and a
deadline on every test (pytest-timeout)."""

from __future__ import annotations

import socket

import pytest
from pytest_socket import SocketConnectBlockedError


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
def test_outside_hosts_are_unreachable() -> None:
    # 0.0.0.0 reaches this machine too (so no packet leaves it were the guard off), but is not on the list
    with socket.socket() as outside, pytest.raises(SocketConnectBlockedError):
        outside.connect(("0.0.0.0", 80))


def test_loopback_is_allowed() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=1):
            pass


def test_every_test_has_a_deadline(request: pytest.FixtureRequest) -> None:
    assert float(request.config.getini("timeout")) > 0
    assert request.config.getini("timeout_method") == "signal"
