"""Which namespace the egress proxy dials an address from: the route files nodes write."""

from __future__ import annotations

from pathlib import Path

from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.netproxy import route_for


def test_an_address_a_route_file_holds_is_dialled_in_its_namespace(tmp_path: Path) -> None:
    (tmp_path / "cp").mkdir()
    plane = ControlPlane(binaries=tmp_path, workdir=tmp_path / "cp")
    plane.route_to_namespace("a", netns=Path("/run/netns/a"), cidrs=["10.89.1.0/24"])
    plane.route_to_namespace("b", netns=Path("/run/netns/b"), cidrs=["10.89.2.0/24", "10.90.0.1/32"])
    routes = tmp_path / "cp" / "egress"

    assert route_for(routes, "10.89.1.7") == "/run/netns/a"
    assert route_for(routes, "10.89.2.1") == "/run/netns/b"
    assert route_for(routes, "10.90.0.1") == "/run/netns/b"
    # Anything else, and names, from the host's namespace.
    assert route_for(routes, "10.89.3.1") is None
    assert route_for(routes, "127.0.0.1") is None
    assert route_for(routes, "draco-node") is None
    assert sorted(plane.routed_cidrs()) == ["10.89.1.0/24", "10.89.2.0/24", "10.90.0.1/32"]

    plane.unroute("a")
    assert route_for(routes, "10.89.1.7") is None
    assert plane.routed_cidrs() == ["10.89.2.0/24", "10.90.0.1/32"]


def test_a_broken_route_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "partial.json").write_text('{"cidrs": ["10.89.1.0/24"]}')
    (tmp_path / "good.json").write_text('{"netns": "/run/netns/n", "cidrs": ["10.89.1.0/24"]}')
    assert route_for(tmp_path, "10.89.1.2") == "/run/netns/n"


def test_the_service_address_is_the_first_of_the_range(tmp_path: Path) -> None:
    assert ControlPlane(binaries=tmp_path).service_address == "10.0.0.1"
    assert ControlPlane(binaries=tmp_path, service_cidr="10.90.0.0/24").service_address == "10.90.0.1"
