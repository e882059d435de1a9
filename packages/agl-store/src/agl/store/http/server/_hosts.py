"""DNS-rebinding protection for servers without a token: which ``Host`` headers a local server answers.

A web page the developer opens can make the browser send requests to ``attacker.example``, whose name the
attacker then points at 127.0.0.1: the browser treats the answers as the page's own, so the page can read
and write a token-less server on the developer's machine. Such a request carries ``Host: attacker.example``.
A server bound to a loopback address without a token therefore answers only requests whose ``Host`` is an
IP address or a local name; with a token, or bound to other interfaces (whose users can reach it anyway),
any ``Host`` is accepted.
"""

from __future__ import annotations

import ipaddress

from ._middleware import Message, json_error

__all__ = ["host_allowed", "local_host_names", "misdirected", "misdirected_reason"]

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})


def local_host_names(bound_host: str, token: str | None, *extra: str) -> frozenset[str] | None:
    """The host names a server bound to ``bound_host`` answers to (IP addresses always pass), or ``None`` for
    any: a server with a token, or one bound to an interface other than loopback."""
    if token or not _is_loopback(bound_host):
        return None
    return _LOOPBACK_NAMES | {name.lower() for name in extra if name}


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(header: bytes | None, names: frozenset[str]) -> bool:
    """Whether a ``Host`` header (``None``: none sent, as HTTP/1.0 allows) names an IP address or one of
    ``names`` (any port)."""
    if header is None:
        return True
    host = header.decode("latin-1").strip().lower()
    if host.startswith("["):  # [IPv6]:port
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    if host in names:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def misdirected_reason(header: bytes, server: str = "server") -> str:
    """Why a request whose ``Host`` a token-less local ``server`` does not answer to is refused (421)."""
    name = header.decode("latin-1")[:100]
    return (
        f"Host {name!r} is not a name of this {server}: without a token it answers only to localhost and IP "
        f"addresses (protection against DNS rebinding); connect through 127.0.0.1, or give the {server} a token"
    )


def misdirected(header: bytes) -> tuple[Message, Message]:
    """The 421 answer to a request whose ``Host`` this server does not answer to."""
    return json_error(421, misdirected_reason(header), "MisdirectedRequest")
