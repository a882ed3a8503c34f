"""The outbound address policy: the one door for requests to addresses that users enter.

Webhooks (apps/notify) and, later, the enterprise chat robots post to URLs that a project admin types.
Without a policy that is a request forgery primitive: the worker would post signed payloads to the
platform's own internals (loopback), the cloud metadata service (169.254.169.254) or the private
network. So every such request goes through ``request()``, which

1. resolves the host **once** (``socket.getaddrinfo``);
2. checks every address it got (``refused_kind``) after normalising it: an IPv4-mapped IPv6 address
   (``::ffff:127.0.0.1``) is its IPv4 address, a NAT64 address (``64:ff9b::/96``) is checked as the IPv4
   address it embeds, a 6to4 address (``2002::/16``) both as itself and as its embedded IPv4 address,
   a scoped IPv6 address without its zone. Loopback, link-local, unspecified, private (RFC 1918, ULA),
   carrier-grade NAT, multicast, documentation and other reserved ranges are refused unless they are
   in ``SUANCHI['OUTBOUND_ALLOWED_NETWORKS']`` (a list of CIDRs; the tests and the demo allow loopback);
   one refused address refuses the name, and a name that does not resolve is refused;
3. dials exactly the addresses it checked (so a second DNS answer cannot swap them: DNS rebinding),
   with the URL's host in the ``Host`` header and, for https, as the TLS server name the certificate
   is verified against;
4. follows no redirect (http.client never does): the caller sees the 3xx status.

``request`` answers the HTTP status only; it never reads or returns the response body, and every
failure without an HTTP answer (refused, reset, timed out, TLS, not HTTP) is one ``RequestFailed``, so
what callers show cannot tell a closed port from a filtered or an open one. ``check_url`` is the same
resolution and check for subscribe-time validation.

Address ranges: IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890) and RFC 1918
(private), RFC 6598 (100.64.0.0/10), RFC 5737 / RFC 3849 / RFC 9637 (documentation), RFC 4193 (ULA
fc00::/7), RFC 3879 (deprecated site-local fec0::/10), RFC 4291 §2.5.5.2 (IPv4-mapped), RFC 6052 and
RFC 8215 (NAT64 64:ff9b::/96 and the local-use 64:ff9b:1::/48), RFC 3056 (6to4), RFC 4291 §2.4 (global
unicast is 2000::/3; the rest of the IPv6 space is unassigned or special).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from apps.core.conf import suanchi_setting

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

KIND_LABELS = {
    "unspecified": gettext_lazy("an unspecified address"),
    "loopback": gettext_lazy("a loopback address"),
    "link-local": gettext_lazy("a link-local address"),
    "private": gettext_lazy("a private-network address"),
    "carrier-grade NAT": gettext_lazy("a carrier-grade NAT address"),
    "multicast": gettext_lazy("a multicast address"),
    "documentation": gettext_lazy("a documentation address"),
    "reserved": gettext_lazy("a reserved address"),
}


def _table(rows: tuple[tuple[str, str], ...]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), kind) for cidr, kind in rows)


_REFUSED_V4 = _table(
    (
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("224.0.0.0/4", "multicast"),
        ("192.0.2.0/24", "documentation"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
        ("192.88.99.0/24", "reserved"),  # the deprecated 6to4 relay anycast
        ("198.18.0.0/15", "reserved"),  # benchmarking
        ("240.0.0.0/4", "reserved"),  # incl. 255.255.255.255
    )
)
_REFUSED_V6 = _table(
    (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fe80::/10", "link-local"),
        ("fc00::/7", "private"),
        ("fec0::/10", "private"),
        ("ff00::/8", "multicast"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("2001::/23", "reserved"),  # IETF protocol assignments: Teredo, ORCHID, benchmarking
    )
)
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class OutboundError(Exception):
    """A request the policy did not make or that got no HTTP answer."""


class BadURL(OutboundError):
    """Not an http(s) URL with a host (and a valid port)."""


class AddressRefused(OutboundError):
    """The host does not resolve, or resolves to an address the policy refuses."""

    def __init__(self, host: str, kind: str, address: str = "") -> None:
        super().__init__(f"{host}: {kind} {address}".strip())
        self.host, self.kind, self.address = host, kind, address

    def describe(self) -> str:
        """A sentence for the person who entered the URL (the resolved address is not echoed: the
        web process's DNS may see names the user should not learn the addresses of)."""
        if self.kind == "unresolvable":
            return _("%(host)s does not resolve to an address.") % {"host": self.host[:100]}
        params = {"host": self.host[:100], "kind": KIND_LABELS.get(self.kind, self.kind)}
        if _literal(self.host) is not None:
            return _("%(host)s is %(kind)s, which the outbound address policy refuses.") % params
        return _("%(host)s resolves to %(kind)s, which the outbound address policy refuses.") % params


class RequestFailed(OutboundError):
    """No HTTP answer: connection refused or reset, timeout, TLS failure, not an HTTP server. The
    cause is kept for the server log only; callers show one text for all of them."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as in the URL (Host header, TLS server name)
    port: int
    path: str  # path and query
    addresses: tuple[tuple[int, tuple], ...]  # (family, sockaddr) checked by the policy, in order


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def allowed_networks() -> tuple[IPNetwork, ...]:
    """``SUANCHI['OUTBOUND_ALLOWED_NETWORKS']`` parsed (read at each call: settings may change)."""
    out = []
    for entry in suanchi_setting("OUTBOUND_ALLOWED_NETWORKS", None) or ():
        try:
            out.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"SUANCHI_OUTBOUND_ALLOWED_NETWORKS: {entry!r} is not a CIDR")
    return tuple(out)


def checked_forms(address: str) -> tuple[IPAddress, ...]:
    """The addresses the policy checks for one dialled address (see the module docstring)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a scoped address without its zone
    if ip.version == 4:
        return (ip,)
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    if ip in _NAT64:
        return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)
    if ip.sixtofour is not None:
        return (ip, ip.sixtofour)
    return (ip,)


def _kind(ip: IPAddress) -> str | None:
    for network, kind in _REFUSED_V4 if ip.version == 4 else _REFUSED_V6:
        if ip in network:
            return kind
    if ip.version == 6 and ip not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return None


def refused_kind(address: str, allowed: tuple[IPNetwork, ...] | None = None) -> str | None:
    """None when the policy allows dialling ``address``; else the kind of range that refuses it."""
    allowed = allowed_networks() if allowed is None else allowed
    for ip in checked_forms(address):
        kind = _kind(ip)
        if kind is not None and not any(ip.version == net.version and ip in net for net in allowed):
            return kind
    return None


def resolve(host: str, port: int) -> tuple[tuple[int, tuple], ...]:
    """Every address of ``host`` once, each allowed by the policy; else ``AddressRefused``."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):  # UnicodeError: a label IDNA cannot encode (too long, empty)
        raise AddressRefused(host, "unresolvable") from None
    allowed = allowed_networks()
    addresses: list[tuple[int, tuple]] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = str(sockaddr[0])
        kind = refused_kind(address, allowed)
        if kind is not None:
            raise AddressRefused(host, kind, address)
        if (family, sockaddr) not in addresses:
            addresses.append((family, sockaddr))
    if not addresses:
        raise AddressRefused(host, "unresolvable")
    return tuple(addresses)


def check_url(url: str) -> Target:
    """Parse ``url`` (http or https, a host) and resolve and check its host: ``BadURL`` or
    ``AddressRefused`` when the policy would not send to it now."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port out of range or not a number, a broken IPv6 literal
        raise BadURL(url) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadURL(url)
    port = port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, resolve(parts.hostname, port))


def _dial(addresses: tuple[tuple[int, tuple], ...], timeout: float) -> socket.socket:
    """Connect to the first of the checked addresses that answers (never to a name)."""
    error: OSError | None = None
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error or OSError("no address")


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to the target's checked addresses; ``Host`` stays the URL's host."""

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self.target = target
        self._timeout_s = timeout

    def connect(self) -> None:
        self.sock = _dial(self.target.addresses, self._timeout_s)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    """The same over TLS: the certificate is verified against the URL's host (SNI), not the IP."""

    default_port = http.client.HTTPS_PORT

    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target, timeout)
        self.tls = ssl.create_default_context()

    def connect(self) -> None:
        sock = _dial(self.target.addresses, self._timeout_s)
        try:
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.target.host)
        except BaseException:
            sock.close()
            raise


def _exchange(
    method: str, url: str, *, body: bytes, headers: dict[str, str], timeout: float, read: int
) -> tuple[int, bytes]:
    target = check_url(url)
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = kind(target, timeout)
    try:
        connection.request(method, target.path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, (response.read(read) if read else b"")
    except (OSError, http.client.HTTPException, ValueError) as exc:  # ssl.SSLError is an OSError
        raise RequestFailed(f"{type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()


def request(method: str, url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """Send one request under the policy and return the HTTP status (redirects are not followed).
    Raises ``BadURL``, ``AddressRefused`` or ``RequestFailed``; never returns the response body."""
    return _exchange(method, url, body=body, headers=headers, timeout=timeout, read=0)[0]


# The chat robots (DingTalk, WeCom, Feishu) answer HTTP 200 also when they refuse a message (a wrong
# signature, a rate limit): the verdict is an error code in a small JSON body.
JSON_ANSWER_LIMIT = 4096


def request_json(
    method: str, url: str, *, body: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, dict | None]:
    """``request``, and the answer's JSON object when the body is one (at most ``JSON_ANSWER_LIMIT``
    bytes are read; anything else is None). Callers show only the error code they look for in it,
    never the body, so the answer of an arbitrary host tells the person who typed the URL nothing more
    than its status would."""
    import json

    status, raw = _exchange(method, url, body=body, headers=headers, timeout=timeout, read=JSON_ANSWER_LIMIT)
    try:
        answer = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return status, None
    return status, answer if isinstance(answer, dict) else None
