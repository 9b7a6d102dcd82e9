"""Which hosts are loopback: the one answer ``reef serve`` and the installers share."""

from __future__ import annotations

import pytest

from reef_core.hosts import is_loopback, url_host


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST", "localhost.", "::ffff:127.0.0.1"],
)
def test_loopback_hosts(host: str):
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    [
        "0.0.0.0",
        "::",
        "",
        "10.1.2.3",
        "192.168.1.5",
        "::ffff:10.1.2.3",
        "fe80::1",
        "reef.lan",
        "localhost.evil",
    ],
)
def test_everything_else_is_reachable_from_elsewhere(host: str):
    """Wildcards listen on every interface; a hostname may resolve anywhere."""
    assert not is_loopback(host)


def test_url_host_drops_port_and_brackets():
    assert url_host("http://[::1]:8900/x") == "::1"
    assert url_host("http://Reef.LAN:8900") == "reef.lan"
    assert url_host("not a url") == ""
