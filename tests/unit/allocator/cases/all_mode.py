"""allocationMode: All: every matching device of the node, or nothing."""

from __future__ import annotations

from ..kit import (
    NIC,
    allocated,
    case,
    claim,
    counter_set,
    dev,
    device_class,
    devs,
    error,
    first,
    match,
    ok,
    ok_many,
    req,
    res,
    slice_,
    sub,
    taint,
    unfit,
)

NUMA = "gpu.example.com/numa"

CASES = [
    case(
        "all-single-device",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "all-several-devices-in-order",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=devs(3, prefix="gpu-"))],
        expected=ok(*[res("req-0", f"gpu-{i}") for i in range(3)]),
    ),
    case(
        "all-across-pools",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
            slice_("s-a", pool="pool-a", devices=[dev("gpu-0"), dev("gpu-1")]),
        ],
        expected=ok(
            res("req-0", "gpu-0", pool="pool-a"),
            res("req-0", "gpu-1", pool="pool-a"),
            res("req-0", "gpu-0", pool="pool-b"),
        ),
    ),
    case(
        "all-only-matching-devices",
        claims=[
            claim(
                "claim-0",
                req("req-0", all=True, selectors=['device.attributes["gpu.example.com"].model == "a"']),
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"model": "a"}),
                    dev("gpu-1", attrs={"model": "b"}),
                    dev("gpu-2", attrs={"model": "a"}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-2")),
    ),
    case(
        "all-only-class-driver",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "all-ignores-other-nodes",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(node="node-2", devices=[dev("gpu-1")])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "all-no-slices-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True))],
        expected=unfit(),
    ),
    case(
        "all-slice-without-devices-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[])],
        expected=unfit(),
    ),
    case(
        "all-nothing-matches-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True, selectors=["false"]))],
        slices=[slice_(devices=devs(2))],
        expected=unfit(),
    ),
    case(
        "all-with-one-device-in-use-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=unfit(),
    ),
    case(
        "all-with-unmatched-device-in-use-still-fits",
        claims=[
            claim(
                "claim-0",
                req("req-0", all=True, selectors=['device.attributes["gpu.example.com"].model == "a"']),
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "a"}), dev("gpu-1", attrs={"model": "b"})])],
        allocated=[allocated("old", res("r", "gpu-1"))],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "all-plus-another-request-does-not-fit",
        # "All" takes every device, so nothing is left for the second request.
        claims=[claim("claim-0", req("all", all=True), req("one"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "another-request-then-all-does-not-fit",
        claims=[claim("claim-0", req("one"), req("all", all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "all-plus-another-class",
        claims=[claim("claim-0", req("all", all=True), req("nic", "nic"))],
        slices=[slice_(devices=devs(2, prefix="gpu-")), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("all", "gpu-0"), res("all", "gpu-1"), res("nic", "nic-0", driver=NIC)),
    ),
    case(
        "other-class-then-all",
        claims=[claim("claim-0", req("nic", "nic"), req("all", all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-")), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("nic", "nic-0", driver=NIC), res("all", "gpu-0"), res("all", "gpu-1")),
    ),
    case(
        "all-disjoint-selectors-in-two-requests",
        claims=[
            claim(
                "claim-0",
                req("a", all=True, selectors=['device.attributes["gpu.example.com"].model == "a"']),
                req("b", all=True, selectors=['device.attributes["gpu.example.com"].model == "b"']),
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"model": "a"}),
                    dev("gpu-1", attrs={"model": "b"}),
                    dev("gpu-2", attrs={"model": "a"}),
                ]
            )
        ],
        expected=ok(res("a", "gpu-0"), res("a", "gpu-2"), res("b", "gpu-1")),
    ),
    case(
        "all-in-two-claims-conflict",
        claims=[claim("claim-0", req("r", all=True)), claim("claim-1", req("r", all=True))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "all-of-incomplete-pool-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_("s-1", count=2, devices=[dev("gpu-0")])],
        expected=error("node-1"),
    ),
    case(
        "all-with-incomplete-pool-of-other-driver-is-an-error",
        # Any incomplete pool for the node blocks "All", not only pools of the class.
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_(devices=[dev("gpu-0")]),
            slice_(driver=NIC, pool="nic-pool", count=2, devices=[dev("nic-0")]),
        ],
        expected=error("nic-pool"),
    ),
    case(
        "exact-count-with-incomplete-pool-of-other-driver-is-fine",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(devices=[dev("gpu-0")]),
            slice_(driver=NIC, pool="nic-pool", count=2, devices=[dev("nic-0")]),
        ],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "all-with-invalid-pool-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_("s-1", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", count=2, devices=[dev("gpu-0")]),
        ],
        expected=error("invalid"),
    ),
    case(
        "all-with-pool-spanning-nodes-takes-only-local-slices",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_("s-1", node="node-1", pool="shared", count=2, devices=[dev("gpu-0")]),
            slice_("s-2", node="node-2", pool="shared", count=2, devices=[dev("gpu-1")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="shared")),
    ),
    case(
        "all-with-network-attached-devices",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(node=None, all_nodes=True, pool="net", devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0", pool="net"), res("req-0", "gpu-1", pool="net"), node_selector=None),
    ),
    case(
        "all-with-counters-that-do-not-allow-all",
        # Both partitions match, but together they need more than the counter set has:
        # "All" cannot be satisfied.
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_("s-c", count=2, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_(
                "s-d",
                count=2,
                devices=[
                    dev("part-0", consumes={"mem": {"memory": "6Gi"}}),
                    dev("part-1", consumes={"mem": {"memory": "6Gi"}}),
                ],
            ),
        ],
        expected=unfit(),
    ),
    case(
        "all-with-counters-that-allow-all",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_("s-c", count=2, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_(
                "s-d",
                count=2,
                devices=[
                    dev("part-0", consumes={"mem": {"memory": "4Gi"}}),
                    dev("part-1", consumes={"mem": {"memory": "4Gi"}}),
                ],
            ),
        ],
        expected=ok(res("req-0", "part-0"), res("req-0", "part-1")),
    ),
    case(
        "all-more-than-32-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=devs(33, prefix="gpu-"))],
        expected=error("32"),
    ),
    case(
        "all-exactly-32",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=devs(32, prefix="gpu-"))],
        expected=ok(*[res("req-0", f"gpu-{i}") for i in range(32)]),
    ),
    case(
        "all-32-plus-one-more-request-is-an-error-or-unfit",
        # 32 from "All" plus one more would exceed the result limit.
        claims=[claim("claim-0", req("all", all=True), req("nic", "nic"))],
        slices=[slice_(devices=devs(32, prefix="gpu-")), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=error("32"),
    ),
    case(
        "all-in-two-claims-disjoint-classes",
        claims=[claim("claim-0", req("r", all=True)), claim("claim-1", req("r", "nic", all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-")), slice_(driver=NIC, devices=devs(2, prefix="nic-"))],
        expected=ok_many(
            claim_0=[res("r", "gpu-0"), res("r", "gpu-1")],
            claim_1=[res("r", "nic-0", driver=NIC), res("r", "nic-1", driver=NIC)],
        ),
    ),
    case(
        "all-class-with-selector",
        claims=[claim("claim-0", req("r", "big", all=True))],
        classes=[device_class("big", selectors=['device.attributes["gpu.example.com"].big'])],
        slices=[slice_(devices=[dev("gpu-0", attrs={"big": True}), dev("gpu-1", attrs={"big": False})])],
        expected=ok(res("r", "gpu-0")),
    ),
    # --- a broken claim constraint is an input error, found in device order (issue 16)
    case(
        "all-constraint-broken-before-a-device-in-use-is-an-error",
        # Upstream takes the devices in order: gpu-1 breaks the constraint before gpu-2
        # (in use) is reached, which is an error, not "does not fit".
        claims=[claim("claim-0", req("req-0", all=True), constraints=[match(NUMA)])],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 1}), dev("gpu-2")])
        ],
        allocated=[allocated("old", res("r", "gpu-2"))],
        expected=error("constraint"),
    ),
    case(
        "all-device-in-use-before-a-broken-constraint-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True), constraints=[match(NUMA)])],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1"), dev("gpu-2", attrs={"numa": 1})])
        ],
        allocated=[allocated("old", res("r", "gpu-1"))],
        expected=unfit(),
    ),
    case(
        "all-constraint-broken-before-a-tainted-device-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True), constraints=[match(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 1}),
                    dev("gpu-2", attrs={"numa": 0}, taints=[taint("broken", "NoSchedule")]),
                ]
            )
        ],
        expected=error("constraint"),
    ),
    case(
        "all-constraint-error-comes-before-a-later-request-without-devices",
        # The cheap "request req-1 has no candidates" proof must not hide the error
        # upstream's search meets first.
        claims=[
            claim(
                "claim-0",
                req("req-0", all=True),
                req("req-1", selectors=["device.attributes['gpu.example.com'].numa == 7"]),
                constraints=[match(NUMA, "req-0")],
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 1})])],
        expected=error("constraint"),
    ),
    case(
        "all-constraint-broken-in-first-available-is-an-error",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("all", all=True), sub("one")),
                constraints=[match(NUMA)],
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 1})])],
        expected=error("constraint"),
    ),
    case(
        "all-constraint-error-is-found-behind-an-interchangeable-device",
        # Found by the differential test: with gpu-0 taken by req-0, "all" fails quietly
        # (gpu-0 in use); with its twin gpu-1 taken, "all" meets gpu-0 first and breaks
        # the constraint, which upstream reports as an error.
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1", all=True),
                constraints=[{"distinctAttribute": NUMA}],
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 0})])],
        expected=error("constraint"),
    ),
]
