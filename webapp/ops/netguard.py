"""Which network addresses a webhook may reach: a user who configures a webhook must not
make the workers talk to the machines and services behind them (the cloud metadata address
169.254.169.254, the database, the broker, anything on loopback or a private network).

A target is refused when its host is, or resolves to, any address that is loopback,
link-local, private, shared (100.64.0.0/10), multicast, reserved, unspecified or otherwise
not globally routable, IPv4 or IPv6; an IPv6 address that carries an IPv4 one (IPv4-mapped
``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4, Teredo) is judged by that IPv4 address as
well. SHARDYARD_WEBHOOK_ALLOW_NETWORKS (a comma-separated CIDR list) lets an operator permit
internal receivers. Only ``http`` and ``https`` are accepted.

``target_check`` resolves the name once and returns the addresses; the sender connects to
one of exactly those addresses (never resolving again), so a name whose DNS answer changes
between the check and the connection cannot steer the request elsewhere.

Pure Python (no Django): the settings module parses the allow-list with it."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(ValueError):
    """The URL may not be a webhook's target; the message says why."""


class TargetUnresolved(TargetRefused):
    """The URL's host name does not resolve (now): nothing was refused for its address."""


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect and what to tell the server."""

    scheme: str
    host: str  # the name (or address) as written, without brackets
    port: int
    path: str  # path and query, at least "/"
    host_header: str  # "name[:port]" as a browser sends it
    addresses: tuple[Address, ...]  # all checked; connect to one of these only
    userinfo: tuple[str, str] | None


def parse_networks(text: str, *, name: str = "SHARDYARD_WEBHOOK_ALLOW_NETWORKS") -> tuple:
    """``"127.0.0.0/8, 10.0.0.0/8, fd00::/8"`` -> networks; a bad item is named."""
    out = []
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=True))
        except ValueError as exc:
            raise ValueError(f"{name}: {item!r} is not a CIDR network ({exc})") from None
    return tuple(out)


def _embedded_ipv4(ip: Address) -> list[ipaddress.IPv4Address]:
    if ip.version != 6:
        return []
    out = []
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    if ip in _NAT64:
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def _kind(ip: Address) -> str | None:
    """Why ``ip`` is not a public address, or None when it is."""
    for inner in _embedded_ipv4(ip):
        why = _kind(inner)
        if why:
            return f"{why} (it carries {inner})"
    for label, bad in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("not globally routable", not ip.is_global),
    ):
        if bad:
            return label
    return None


def address_refusal(ip: Address, allow: Iterable[Network] = ()) -> str | None:
    """Why a webhook may not connect to ``ip`` (None: it may)."""
    allow = tuple(allow)
    candidates = [ip, *_embedded_ipv4(ip)]
    if any(c.version == n.version and c in n for c in candidates for n in allow):
        return None
    why = _kind(ip)
    if why:
        return f"{ip} is {why}, not a public address"
    return None


def target_check(url: str, allow: Iterable[Network] = (), *, resolve=socket.getaddrinfo) -> Target:
    """Check ``url`` and resolve its host once: a ``Target`` whose every address may be
    reached. Raises ``TargetRefused`` (the message names the reason) otherwise, and
    ``TargetUnresolved`` when the name has no address now."""
    allow = tuple(allow)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"{url!r} is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise TargetRefused(f"scheme {parts.scheme or '(none)'!r}: only http and https")
    host = parts.hostname
    if not host:
        raise TargetRefused(f"{url!r} names no host")
    port = port or (443 if scheme == "https" else 80)
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = resolve(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise TargetUnresolved(f"host {host!r} does not resolve ({exc})") from None
        addresses = list(
            dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos)
        )
        if not addresses:
            raise TargetUnresolved(f"host {host!r} has no address")
    for ip in addresses:
        why = address_refusal(ip, allow)
        if why:
            where = "" if literal is not None else f"host {host!r} resolves to {ip}: "
            raise TargetRefused(
                f"{where}{why}; webhooks may reach public addresses only (an operator may "
                "permit internal networks with SHARDYARD_WEBHOOK_ALLOW_NETWORKS)"
            )
    bracketed = f"[{host}]" if ":" in host else host
    default = (scheme == "https" and port == 443) or (scheme == "http" and port == 80)
    userinfo = None
    if parts.username is not None:
        userinfo = (unquote(parts.username), unquote(parts.password or ""))
    return Target(
        scheme=scheme,
        host=host,
        port=port,
        path=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
        host_header=bracketed if default else f"{bracketed}:{port}",
        addresses=tuple(addresses),
        userinfo=userinfo,
    )
