"""The host's network namespace as a run found it, and what a running test node or
cluster may not have changed in it: no IPv4 address, no IPv4 route, and nothing that
reaches the node's or the Services' ranges (they live in the node's own namespace).
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass

__all__ = ["HostNetwork", "host_network", "host_network_leaks"]


def _lines(*argv: str) -> frozenset[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    return frozenset(line.strip() for line in out.splitlines() if line.strip())


@dataclass(frozen=True)
class HostNetwork:
    """`ip -4 -o addr show`, `ip -4 route show table all` and the link names, of the
    namespace this process runs in (the host's)."""

    addresses: frozenset[str]
    routes: frozenset[str]
    links: frozenset[str]

    def text(self) -> str:
        return "\n".join(
            ["# ip -4 -o addr show", *sorted(self.addresses), "# ip -4 route", *sorted(self.routes)]
        )


def host_network() -> HostNetwork:
    links = {line.split(":")[1].strip().split("@")[0] for line in _lines("ip", "-o", "link", "show")}
    return HostNetwork(
        addresses=_lines("ip", "-4", "-o", "addr", "show"),
        routes=_lines("ip", "-4", "route", "show", "table", "all"),
        links=frozenset(links),
    )


def _networks(line: str) -> list[ipaddress.IPv4Network]:
    found = []
    for word in line.split():
        try:
            found.append(ipaddress.IPv4Network(word, strict=False))
        except ValueError:
            continue
    return found


def host_network_leaks(before: HostNetwork, *, ranges: list[str], links: list[str]) -> list[str]:
    """What the host's namespace shows now that it did not before (an address or a route),
    and whatever in it touches `ranges` (the node's pods, its address, the Services) or is
    named like one of `links` (the node's bridge): each as a line saying what."""
    now = host_network()
    leaks = [f"new address: {a}" for a in sorted(now.addresses - before.addresses)]
    leaks += [f"new route: {r}" for r in sorted(now.routes - before.routes)]
    nets = [ipaddress.IPv4Network(r) for r in ranges]
    for line in sorted(now.addresses | now.routes):
        if any(n.overlaps(o) for n in _networks(line) for o in nets if n.prefixlen > 0):
            leaks.append(f"reaches {', '.join(ranges)}: {line}")
    leaks += [f"link {name} in the host's namespace" for name in links if name in now.links]
    return leaks
