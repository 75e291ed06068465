"""Groups of pods: which group a pod is in, what the group asks for, and the one decision
over its members (all or nothing, best-fit domains)."""

from __future__ import annotations

from typing import Any

import pytest

from draco.cel.device import DeviceView
from draco.cel.selector import compile_selector
from draco.scheduling.groups import (
    Domain,
    GroupRef,
    Member,
    attribute_domains,
    attribute_selector,
    device_need,
    group_of,
    node_domains,
    place_group,
    policy_of,
    refusal_message,
)
from draco.scheduling.podinfo import PodInfo
from draco.scheduling.podplan import ClaimStep, PodPlan, PodRequest, Unplaced


def _pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p", "labels": labels, "annotations": annotations or {}}}


def test_the_conventions_users_write_name_a_group_in_order() -> None:
    assert group_of(_pod({})) is None
    assert group_of(_pod({"scheduling.draco.dev/pod-group": "g"})) == GroupRef("ns", "g")
    assert group_of(_pod({"scheduling.x-k8s.io/pod-group": "g"})) == GroupRef("ns", "g", "coscheduling")
    kueue = group_of(
        _pod({"kueue.x-k8s.io/pod-group-name": "g"}, {"kueue.x-k8s.io/pod-group-total-count": "4"})
    )
    assert kueue == GroupRef("ns", "g", "kueue", count=4)
    both = group_of(_pod({"scheduling.draco.dev/pod-group": "a", "scheduling.x-k8s.io/pod-group": "b"}))
    assert both is not None and both.name == "a" and both.key == "ns/a"
    assert kueue is not None and kueue.key == "ns/kueue:g"


def test_policies_come_from_the_group_object_or_the_pod() -> None:
    draco = GroupRef("ns", "g")
    assert policy_of(draco, None).problem is not None
    group = {
        "metadata": {"uid": "u1"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {
                "topology": [{"key": "rack"}],
                "deviceTopology": [{"matchAttribute": "gpu.example.com/clique"}],
            },
            "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "t"}],
        },
    }
    policy = policy_of(draco, group)
    assert (policy.min_count, policy.topology_key, policy.device_attribute, policy.uid) == (
        4,
        "rack",
        "gpu.example.com/clique",
        "u1",
    )
    assert [c.resource_claim_template_name for c in policy.claims] == ["t"]
    basic = policy_of(draco, {"spec": {"schedulingPolicy": {"basic": {}}}})
    assert basic.min_count is None and basic.problem is None
    cosched = policy_of(
        GroupRef("ns", "g", "coscheduling"), {"spec": {"minMember": 3, "scheduleTimeoutSeconds": 30}}
    )
    assert (cosched.min_count, cosched.timeout_s) == (3, 30.0)
    assert policy_of(GroupRef("ns", "g", "kueue", count=0), None).problem is not None
    assert policy_of(GroupRef("ns", "g", "kueue", count=5), None).min_count == 5


def test_domains_are_ordered_best_fit_first() -> None:
    labels = {"a1": {"rack": "a"}, "a2": {"rack": "a"}, "b1": {"rack": "b"}, "c1": {"rack": "c"}, "x": {}}
    free = {"a1": 4, "a2": 4, "b1": 5, "c1": 1, "x": 100}
    domains = node_domains("rack", labels, free.get, need=5)
    # b fits with the least to spare, then a; c cannot hold the group and comes last.
    assert [d.label for d in domains] == ["rack=b", "rack=a", "rack=c"]
    assert domains[1].nodes == frozenset({"a1", "a2"})
    values = [("string", "c0", True)] * 8 + [("string", "c1", True)] * 4 + [("string", "c1", False)] * 4
    by_attribute = attribute_domains("gpu.example.com/clique", values, need=4)
    assert [d.label for d in by_attribute] == ["gpu.example.com/clique=c1", "gpu.example.com/clique=c0"]


@pytest.mark.parametrize(
    ("tag", "value", "attributes", "expected"),
    [
        ("string", "c1", {"gpu.example.com/clique": "c1"}, True),
        ("string", "c1", {"gpu.example.com/clique": "c2"}, False),
        ("string", "c1", {}, False),
        ("int", 3, {"gpu.example.com/clique": 3}, True),
        ("bool", True, {"gpu.example.com/clique": False}, False),
    ],
)
def test_attribute_selectors_admit_the_domain_only(
    tag: str, value: Any, attributes: dict[str, Any], expected: bool
) -> None:
    selector = attribute_selector("gpu.example.com/clique", tag, value)
    assert selector is not None
    device = DeviceView("gpu.example.com", attributes, {}, False, "d", "p")
    assert compile_selector(selector).matches(device) is expected
    assert attribute_selector("gpu.example.com/clique", "strings", ["a"]) is None


def _claim(name: str, count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c", "count": count}}]}
        },
    }


def test_device_need_counts_each_claim_once() -> None:
    assert device_need([_claim("a", 2), _claim("b")]) == 3


def _choice(key: str, node: str, allocations: dict[str, Any]) -> PodPlan:
    """A member's plan: its claims allocated on ``node``."""
    namespace, _, name = key.partition("/")
    request = PodRequest(key, PodInfo(uid=f"uid-{name}", namespace=namespace, name=name))
    steps = tuple(
        ClaimStep(k, {"metadata": {"name": k.partition("/")[2]}}, a) for k, a in allocations.items()
    )
    return PodPlan(key, node, request, steps)


class _Cluster:
    """Nodes with device counts; holds take devices until released."""

    def __init__(self, free: dict[str, int]) -> None:
        self.free = dict(free)
        self.held: list[PodPlan] = []
        self.decided: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    def decide(self, member: Member, domain: Domain | None) -> PodPlan | Unplaced:
        pending = tuple(c["metadata"]["name"] for c in member.pending)
        allocated = tuple(c["metadata"]["name"] for c in member.allocated)
        self.decided.append((member.key, pending, allocated))
        for node, free in sorted(self.free.items()):
            if domain is not None and domain.nodes is not None and node not in domain.nodes:
                continue
            if free >= len(pending):
                allocations: dict[str, Any] = {f"ns/{name}": {"node": node} for name in pending}
                return _choice(member.key, node, allocations)
        return Unplaced(member.key, "0/2 nodes are available: 2 cannot allocate all claims.")

    def hold(self, choice: PodPlan) -> None:
        self.free[choice.node] -= len(choice.allocations)
        self.held.append(choice)

    def release(self) -> None:
        for choice in self.held:
            self.free[choice.node] += len(choice.allocations)
        self.held.clear()


def test_a_group_that_does_not_fit_holds_nothing() -> None:
    cluster = _Cluster({"a": 2, "b": 1})
    members = [Member(f"ns/p{i}", [_claim(f"c{i}")]) for i in range(4)]
    outcome = place_group(
        members, needed=4, domains=None, decide=cluster.decide, hold=cluster.hold, release=cluster.release
    )
    assert not hasattr(outcome, "chosen")
    assert cluster.free == {"a": 2, "b": 1} and not cluster.held
    message = refusal_message(GroupRef("ns", "g"), outcome)
    assert "3 of 4 pod(s) can be placed together, 4 needed" in message
    assert "first ns/p3: 0/2 nodes are available" in message


def test_a_group_that_fits_is_held_whole_and_claims_shared_by_members_are_allocated_once() -> None:
    cluster = _Cluster({"a": 3})
    shared = _claim("shared")
    members = [Member(f"ns/p{i}", [shared, _claim(f"c{i}")]) for i in range(2)]
    outcome = place_group(
        members, needed=2, domains=None, decide=cluster.decide, hold=cluster.hold, release=cluster.release
    )
    assert [c.key for c in outcome.chosen] == ["ns/p0", "ns/p1"]
    # The second member sees the shared claim allocated by the first, and allocates its own only.
    assert cluster.decided[1] == ("ns/p1", ("c1",), ("shared",))
    assert cluster.free == {"a": 0}


def test_the_first_domain_where_the_whole_group_fits_wins() -> None:
    cluster = _Cluster({"a1": 1, "a2": 1, "b1": 1, "b2": 1, "b3": 1})
    domains = node_domains(
        "rack",
        {
            "a1": {"rack": "a"},
            "a2": {"rack": "a"},
            "b1": {"rack": "b"},
            "b2": {"rack": "b"},
            "b3": {"rack": "b"},
        },
        cluster.free.get,
        need=3,
    )
    members = [Member(f"ns/p{i}", [_claim(f"c{i}")]) for i in range(3)]
    outcome = place_group(
        members, needed=3, domains=domains, decide=cluster.decide, hold=cluster.hold, release=cluster.release
    )
    assert outcome.domain is not None and outcome.domain.label == "rack=b"
    assert {c.node for c in outcome.chosen} == {"b1", "b2", "b3"}


def test_members_beyond_the_minimum_that_do_not_fit_are_left_out() -> None:
    cluster = _Cluster({"a": 2})
    members = [Member(f"ns/p{i}", [_claim(f"c{i}")]) for i in range(3)]
    outcome = place_group(
        members, needed=2, domains=None, decide=cluster.decide, hold=cluster.hold, release=cluster.release
    )
    assert [c.key for c in outcome.chosen] == ["ns/p0", "ns/p1"]
    assert [f.key for f in outcome.left] == ["ns/p2"]
