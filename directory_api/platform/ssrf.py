"""Outbound URLs that other people choose (webhooks): where the service may connect.

A URL is refused unless it is `https` (`http` only when allowed), has no credentials in
it, and every address its host resolves to is a public one: loopback, private (RFC 1918),
link-local (cloud metadata at 169.254.169.254 included), shared (100.64/10), unique-local,
multicast, unspecified and reserved addresses are refused, IPv4 inside IPv6 (mapped,
6to4, NAT64's 64:ff9b::/96) by the address it carries. Networks an operator allows
(`allowed`: an intranet's receivers) pass.

`checked_addresses` answers the addresses checked: the caller connects to one of them, not
to the name again, so a name that resolves elsewhere a second later (DNS rebinding) is
never reached.
"""

import ipaddress
import logging
import socket
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from urllib.parse import SplitResult, urlsplit

log = logging.getLogger(__name__)
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: not is_private
NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Special-purpose ranges that Python 3.11's `is_private` and `is_global` let through.
SPECIAL = tuple(
    ipaddress.ip_network(network)
    for network in (
        "192.0.0.0/24",  # IETF protocol assignments
        "fec0::/10",  # site-local (deprecated, still routed inside some networks)
        "3fff::/20",  # documentation (RFC 9637)
    )
)


class Refused(ValueError):
    """A URL or address the service will not connect to; the message says why."""


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(value.strip(), strict=False) for value in values)


def carried(address: Address) -> Address:
    """The IPv4 address an IPv6 one stands for, if it stands for one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal(address: Address, allowed: tuple[Network, ...]) -> str | None:
    """Why the service may not connect to `address`; None when it may."""
    address = carried(address)
    if any(address in network for network in allowed if network.version == address.version):
        return None
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata among them)"
    if address.version == 4 and address in SHARED:
        return "a shared (carrier-grade NAT) address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_private:
        return "a private address"
    special = any(address in net for net in SPECIAL if net.version == address.version)
    if address.is_reserved or not address.is_global or special:
        return "a reserved address"
    return None


def parsed(url: str, *, allow_http: bool) -> SplitResult:
    """`url`'s parts; `Refused` unless it is an absolute https (or allowed http) URL with a
    host and no credentials."""
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise Refused("Not a valid URL.") from error
    try:
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as error:
        raise Refused("The port must be a number from 0 to 65535.") from error
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        raise Refused("Must be an https URL." if not allow_http else "Must be an http(s) URL.")
    if parts.username is not None or parts.password is not None:
        raise Refused("Must not carry credentials (user:password@): use the signing secret.")
    if not parts.hostname:
        raise Refused("Must name a host.")
    return parts


# Resolutions run here, so that a name server that never answers costs the caller no more
# than its `timeout` (getaddrinfo itself takes no timeout); a stuck one holds a thread of
# the pool until the system's resolver gives up.
RESOLVERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="resolve")


def checked_addresses(
    url: str, *, allow_http: bool, allowed: tuple[Network, ...] = (), timeout: float = 5.0
) -> list[Address]:
    """Every address `url`'s host resolves to (within `timeout` seconds), each one allowed;
    `Refused` otherwise (any refused address refuses the URL: which one a client would
    reach is not ours to pick). The reason names the kind of address, never the address:
    it would tell whoever asks what a name resolves to inside the network."""
    parts = parsed(url, allow_http=allow_http)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    asked = RESOLVERS.submit(socket.getaddrinfo, parts.hostname, port, type=socket.SOCK_STREAM)
    try:
        found = asked.result(timeout=timeout)
    except FutureTimeout as error:
        raise Refused(f"The host {parts.hostname!r} did not resolve in time.") from error
    except (OSError, UnicodeError) as error:
        raise Refused(f"The host {parts.hostname!r} does not resolve.") from error
    addresses = list(
        dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in found)
    )
    for address in addresses:
        why = refusal(address, allowed)
        if why is not None:
            log.info("refused %s: %s resolves to %s", parts.hostname, address, why)
            raise Refused(f"The host {parts.hostname!r} resolves to {why}.")
    return addresses
