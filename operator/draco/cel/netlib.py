"""The Kubernetes IP and CIDR CEL libraries (`ip()`, `cidr()` and their methods).

Network devices publish addresses as string attributes; selectors such as
`cidr("10.0.0.0/8").containsIP(device.attributes["nic.example.com"].ip)` need these
libraries. Parsing follows Kubernetes: no zones, no IPv4-mapped IPv6 addresses, no leading
zeros; a CIDR keeps its address bits (`cidr("10.1.2.3/8").ip()` is `10.1.2.3`).
"""

from __future__ import annotations

import ipaddress
from typing import Any

__all__ = ["CIDR", "IP", "NetError", "parse_cidr", "parse_ip"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class NetError(ValueError):
    """The text is not an address or prefix the Kubernetes libraries accept."""


class IP:
    """A CEL `net.IP` value."""

    __slots__ = ("address",)

    def __init__(self, address: Address) -> None:
        self.address = address

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and self.address == other.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __str__(self) -> str:
        return str(self.address)

    def __repr__(self) -> str:
        return f"ip({str(self)!r})"

    @property
    def family(self) -> int:
        return self.address.version

    @property
    def is_global_unicast(self) -> bool:
        # Go's definition: private ranges count; broadcast, multicast, link-local,
        # loopback and unspecified do not.
        address = self.address
        if address == ipaddress.IPv4Address("255.255.255.255"):
            return False
        return not (
            address.is_unspecified or address.is_loopback or address.is_multicast or address.is_link_local
        )

    @property
    def is_link_local_multicast(self) -> bool:
        if isinstance(self.address, ipaddress.IPv4Address):
            return self.address in ipaddress.IPv4Network("224.0.0.0/24")
        return self.address in ipaddress.IPv6Network("ff02::/16")


class CIDR:
    """A CEL `net.CIDR` value: an address and a prefix length."""

    __slots__ = ("interface",)

    def __init__(self, interface: ipaddress.IPv4Interface | ipaddress.IPv6Interface) -> None:
        self.interface = interface

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and (self.interface.ip, self.interface.network.prefixlen) == (
            other.interface.ip,
            other.interface.network.prefixlen,
        )

    def __hash__(self) -> int:
        return hash((self.interface.ip, self.interface.network.prefixlen))

    def __str__(self) -> str:
        return f"{self.interface.ip}/{self.interface.network.prefixlen}"

    def __repr__(self) -> str:
        return f"cidr({str(self)!r})"

    def contains_ip(self, address: IP) -> bool:
        return address.address in self.interface.network

    def contains_cidr(self, other: CIDR) -> bool:
        mine, theirs = self.interface.network, other.interface.network
        return mine.version == theirs.version and theirs.subnet_of(mine)  # type: ignore[arg-type]

    @property
    def ip(self) -> IP:
        return IP(self.interface.ip)

    @property
    def masked(self) -> CIDR:
        network = self.interface.network
        return CIDR(ipaddress.ip_interface(f"{network.network_address}/{network.prefixlen}"))

    @property
    def prefix_length(self) -> int:
        return self.interface.network.prefixlen


def _check_address(text: str, address: Any) -> None:
    if "%" in text:
        raise NetError(f"IP address with zone value is not allowed: {text!r}")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise NetError(f"IPv4-mapped IPv6 address is not allowed: {text!r}")


def parse_ip(text: str) -> IP:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise NetError(f"IP Address {text!r} parse error during conversion from string") from None
    _check_address(text, address)
    return IP(address)


def parse_cidr(text: str) -> CIDR:
    _, slash, prefix = text.partition("/")
    # Python also takes netmasks and leading zeros after the slash; Go's ParsePrefix does not.
    if not slash or not (
        prefix == "0" or (prefix[:1] in "123456789" and prefix.isdigit() and prefix.isascii())
    ):
        raise NetError(f"network address {text!r} parse error during conversion from string")
    try:
        interface = ipaddress.ip_interface(text)
    except ValueError:
        raise NetError(f"network address {text!r} parse error during conversion from string") from None
    _check_address(text, interface.ip)
    return CIDR(interface)
