"""Which addresses stay on this machine: the one answer the daemon and the installers share.

``reef serve`` refuses to listen beyond loopback without a token, and an installer fetched over
plain http from beyond loopback warns before it writes; both ask :func:`is_loopback`.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback", "url_host"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ``::1`` (also as ``[::1]`` or IPv4-mapped) and ``localhost``.

    Any other hostname counts as reachable from elsewhere (it may resolve anywhere), and so do
    the wildcards ``0.0.0.0``, ``::`` and the empty host, which listen on every interface.
    """
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name.rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def url_host(url: str) -> str:
    """The host of ``url`` without port or brackets (``""`` when it has none)."""
    return urlsplit(url).hostname or ""
