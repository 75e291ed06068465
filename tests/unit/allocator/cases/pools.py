"""Pools: generations, resourceSliceCount, incomplete, obsolete and invalid pools."""

from __future__ import annotations

from ..kit import (
    NIC,
    allocated,
    cap,
    case,
    claim,
    counter_set,
    dev,
    error,
    ok,
    req,
    res,
    slice_,
    unfit,
)


def _name_shared_on_node_2(*, first: list[dict] | None = None, numa: int | None = None) -> list[dict]:
    """Pool "spread": node-1's exclusive gpu-0 (8Gi) and node-2's shareable gpu-0 under the
    same name (upstream keys consumed capacity by name)."""
    attrs = {"numa": numa} if numa is not None else None
    return [
        slice_(
            "s-1",
            pool="spread",
            count=2,
            devices=[*(first or []), dev("gpu-0", attrs=attrs, capacity={"memory": cap("8Gi")})],
        ),
        slice_(
            "s-2",
            pool="spread",
            node="node-2",
            count=2,
            devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="1Gi")})],
        ),
    ]


_NAME_SHARED_ON_NODE_2 = _name_shared_on_node_2()

#: A share of node-2's gpu-0 holding 1Gi of memory.
_SHARE_ON_NODE_2 = allocated(
    "old",
    res(
        "r",
        "gpu-0",
        pool="spread",
        shareID="00000000-0000-4000-8000-000000000001",
        consumedCapacity={"memory": "1Gi"},
    ),
    node="node-2",
)

CASES = [
    case(
        "pool-of-two-slices-complete",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_("s-1", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", count=2, devices=[dev("gpu-1")]),
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "incomplete-pool-is-not-used",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_("s-1", count=2, devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "incomplete-pool-skipped-other-pool-used",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-a", pool="pool-a", count=3, devices=[dev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-1")]),
        ],
        expected=ok(res("req-0", "gpu-1", pool="pool-b")),
    ),
    case(
        "newer-generation-replaces-older",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-old", generation=1, devices=[dev("gpu-old")]),
            slice_("s-new", generation=2, devices=[dev("gpu-new")]),
        ],
        expected=ok(res("req-0", "gpu-new")),
    ),
    case(
        "older-generation-devices-are-invisible",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_("s-old", generation=1, devices=[dev("gpu-old")]),
            slice_("s-new", generation=2, devices=[dev("gpu-new")]),
        ],
        expected=unfit(),
    ),
    case(
        "newer-generation-incomplete-makes-pool-unusable",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-old", generation=1, devices=[dev("gpu-old")]),
            slice_("s-new", generation=2, count=2, devices=[dev("gpu-new")]),
        ],
        expected=unfit(),
    ),
    case(
        "obsolete-local-slice-with-newer-generation-elsewhere",
        # The local slice is at generation 1 of a two-slice pool; a generation-2 slice on
        # another node makes it obsolete.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", node="node-1", pool="shared", generation=1, count=2, devices=[dev("gpu-0")]),
            slice_("s-2", node="node-2", pool="shared", generation=2, count=2, devices=[dev("gpu-1")]),
        ],
        expected=unfit(),
    ),
    case(
        "pool-spanning-nodes-complete-across-nodes",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", node="node-2", pool="shared", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", node="node-1", pool="shared", count=2, devices=[dev("gpu-1")]),
        ],
        expected=ok(res("req-0", "gpu-1", pool="shared")),
    ),
    case(
        "local-slices-complete-newer-generation-elsewhere-ignored",
        # Complete at generation 1 among the slices for this node: used as is.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1a", node="node-1", pool="shared", generation=1, count=2, devices=[dev("gpu-0")]),
            slice_("s-1b", node="node-1", pool="shared", generation=1, count=2, devices=[dev("gpu-1")]),
            slice_("s-2", node="node-2", pool="shared", generation=2, count=2, devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="shared")),
    ),
    case(
        "local-slice-newer-generation-incomplete",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1a", node="node-2", pool="shared", generation=1, count=2, devices=[dev("gpu-0")]),
            slice_("s-1b", node="node-2", pool="shared", generation=1, count=2, devices=[dev("gpu-1")]),
            slice_("s-2", node="node-1", pool="shared", generation=2, count=2, devices=[dev("gpu-0")]),
        ],
        expected=unfit(),
    ),
    case(
        "same-pool-name-different-drivers-are-different-pools",
        claims=[claim("claim-0", req("req-0"), req("req-1", "nic"))],
        slices=[
            slice_("s-gpu", pool="p", devices=[dev("dev-0")]),
            slice_("s-nic", driver=NIC, pool="p", devices=[dev("dev-0")]),
        ],
        expected=ok(res("req-0", "dev-0", pool="p"), res("req-1", "dev-0", driver=NIC, pool="p")),
    ),
    case(
        "incomplete-pool-of-one-driver-does-not-affect-other",
        claims=[claim("claim-0", req("req-0", "nic"))],
        slices=[
            slice_("s-gpu", pool="p", count=2, devices=[dev("dev-0")]),
            slice_("s-nic", driver=NIC, pool="p", devices=[dev("dev-0")]),
        ],
        expected=ok(res("req-0", "dev-0", driver=NIC, pool="p")),
    ),
    case(
        "duplicate-device-names-make-pool-invalid",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", count=2, devices=[dev("gpu-0")]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "duplicate-device-names-across-nodes-are-judged-per-node",
        # Upstream checks names among the node's slices only (issue 16): node-1 sees one
        # gpu-0, node-2's slice repeats the name.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", pool="spread", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", pool="spread", node="node-2", count=2, devices=[dev("gpu-0"), dev("gpu-1")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="spread")),
    ),
    case(
        "a-name-repeated-on-another-node-charges-its-counters-too",
        # The allocated claim names spread/gpu-0: upstream counts every device published
        # under that name as allocated, so both charge the counter set and gpu-1 is short.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-c", pool="spread", count=3, shared_counters=[counter_set("cs", {"mem": "8Gi"})]),
            slice_(
                "s-1",
                pool="spread",
                count=3,
                devices=[
                    dev("gpu-0", consumes={"cs": {"mem": "4Gi"}}),
                    dev("gpu-1", consumes={"cs": {"mem": "4Gi"}}),
                ],
            ),
            slice_(
                "s-2",
                pool="spread",
                node="node-2",
                count=3,
                devices=[dev("gpu-0", consumes={"cs": {"mem": "4Gi"}})],
            ),
        ],
        allocated=[allocated("old", res("r", "gpu-0", pool="spread"), node="node-2")],
        expected=unfit(),
    ),
    case(
        "a-name-shared-on-another-node-takes-the-unshareable-device",
        # Shares of node-2's gpu-0 consumed memory under the name; upstream checks that
        # against node-1's gpu-0, which cannot be shared and needs all of its memory.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", pool="spread", count=2, devices=[dev("gpu-0", capacity={"memory": cap("8Gi")})]),
            slice_(
                "s-2",
                pool="spread",
                node="node-2",
                count=2,
                devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="1Gi")})],
            ),
        ],
        allocated=[
            allocated(
                "old",
                res(
                    "r",
                    "gpu-0",
                    pool="spread",
                    shareID="00000000-0000-4000-8000-000000000001",
                    consumedCapacity={"memory": "1Gi"},
                ),
                node="node-2",
            )
        ],
        expected=unfit(),
    ),
    case(
        "a-name-shared-on-another-node-leaves-room-for-a-capacity-request",
        # The exclusive gpu-0 needs only the 4Gi asked for on top of the 1Gi the shares of
        # node-2's gpu-0 hold: it is not in use.
        claims=[claim("claim-0", req("req-0", capacity={"memory": "4Gi"}))],
        slices=_NAME_SHARED_ON_NODE_2,
        allocated=[_SHARE_ON_NODE_2],
        expected=ok(res("req-0", "gpu-0", pool="spread")),
    ),
    case(
        "a-name-shared-on-another-node-limits-admin-access-too",
        # Found by the differential test (seed 2, problem 13375): admin access may take a
        # device in use, but not capacity that shares under its name hold.
        claims=[claim("claim-0", req("req-0", admin=True))],
        slices=_NAME_SHARED_ON_NODE_2,
        allocated=[_SHARE_ON_NODE_2],
        expected=unfit(),
    ),
    case(
        "all-on-a-name-shared-on-another-node-meets-the-constraint-before-the-capacity",
        # "all" takes gpu-0 last: upstream checks the constraint (broken: an error)
        # before the capacity the shares under its name hold (short: does not fit).
        claims=[
            claim("claim-0", req("req-0", all=True), constraints=[{"matchAttribute": "gpu.example.com/numa"}])
        ],
        slices=_name_shared_on_node_2(first=[dev("gpu-a", attrs={"numa": 0})], numa=1),
        allocated=[_SHARE_ON_NODE_2],
        expected=error("constraint"),
    ),
    case(
        "all-on-a-name-shared-on-another-node-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=_name_shared_on_node_2(first=[dev("gpu-a")]),
        allocated=[_SHARE_ON_NODE_2],
        expected=unfit(),
    ),
    case(
        "duplicate-device-names-within-the-node-slices-make-pool-invalid",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", pool="spread", count=3, devices=[dev("gpu-0")]),
            slice_("s-2", pool="spread", count=3, devices=[dev("gpu-0")]),
            slice_("s-3", pool="spread", node="node-2", count=3, devices=[dev("gpu-1")]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "duplicate-device-names-in-older-generation-are-harmless",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", generation=1, count=2, devices=[dev("gpu-0")]),
            slice_("s-2", generation=1, count=2, devices=[dev("gpu-0")]),
            slice_("s-3", generation=2, devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "invalid-pool-skipped-if-other-pool-fits",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", pool="bad", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", pool="bad", count=2, devices=[dev("gpu-0")]),
            slice_("s-3", pool="good", devices=[dev("gpu-1")]),
        ],
        expected=ok(res("req-0", "gpu-1", pool="good")),
    ),
    case(
        "invalid-pool-reported-when-nothing-else-fits",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", pool="bad", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", pool="bad", count=2, devices=[dev("gpu-0")]),
            slice_("s-3", pool="good", devices=[dev("gpu-1")]),
        ],
        allocated=[allocated("old", res("r", "gpu-1", pool="good"))],
        expected=unfit("invalid"),
    ),
    case(
        "duplicate-slices-under-two-names-are-invalid",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-1", count=2, devices=[dev("gpu-0"), dev("gpu-1")]),
            slice_("s-1-copy", count=2, devices=[dev("gpu-0"), dev("gpu-1")]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "unknown-counter-set-makes-pool-invalid",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-c", count=2, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("s-d", count=2, devices=[dev("gpu-0", consumes={"other": {"memory": "1Gi"}})]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "unknown-counter-in-counter-set-makes-pool-invalid",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-c", count=2, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("s-d", count=2, devices=[dev("gpu-0", consumes={"mem": {"cores": "1"}})]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "duplicate-counter-set-names-across-slices-make-pool-invalid",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-c1", count=3, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("s-c2", count=3, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("s-d", count=3, devices=[dev("gpu-0", consumes={"mem": {"memory": "1Gi"}})]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "counter-set-of-other-pool-is-unknown",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-c", pool="pool-a", shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("s-d", pool="pool-b", devices=[dev("gpu-0", consumes={"mem": {"memory": "1Gi"}})]),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "invalid-slice-on-other-node-invalidates-whole-pool",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                "s-c",
                node="node-1",
                pool="shared",
                count=3,
                shared_counters=[counter_set("mem", {"memory": "8Gi"})],
            ),
            slice_(
                "s-1",
                node="node-1",
                pool="shared",
                count=3,
                devices=[dev("gpu-0", consumes={"mem": {"memory": "1Gi"}})],
            ),
            slice_(
                "s-2",
                node="node-2",
                pool="shared",
                count=3,
                devices=[dev("gpu-1", consumes={"nope": {"memory": "1Gi"}})],
            ),
        ],
        expected=unfit("invalid"),
    ),
    case(
        "valid-pool-with-counters-in-separate-slice",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-c", count=2, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("s-d", count=2, devices=[dev("gpu-0", consumes={"mem": {"memory": "1Gi"}})]),
        ],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "pool-on-other-node-with-matching-name-is-not-used",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_("s-2", node="node-2", pool="node-1", devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "generation-zero-and-one-mixed",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("a", generation=0, count=2, devices=[dev("gpu-a")]),
            slice_("b", generation=1, count=2, devices=[dev("gpu-b")]),
            slice_("c", generation=1, count=2, devices=[dev("gpu-c")]),
        ],
        expected=ok(res("req-0", "gpu-b")),
    ),
]
