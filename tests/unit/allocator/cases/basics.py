"""Basic ExactCount allocation: counts, order, selectors, backtracking, devices in use."""

from __future__ import annotations

from ..kit import (
    GPU,
    NIC,
    allocated,
    case,
    claim,
    dev,
    device_class,
    devs,
    error,
    expect,
    ok,
    ok_many,
    req,
    res,
    slice_,
    unfit,
)

MEM = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("{}")) >= 0'


def _mem(size: str) -> str:
    return MEM.format(size)


CASES = [
    case(
        "simple-one-device",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "claim-without-requests-gets-empty-result",
        claims=[claim("claim-0")],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(node_selector=None),
    ),
    case(
        "no-slices-does-not-fit",
        claims=[claim("claim-0", req("req-0"))],
        slices=[],
        expected=unfit(),
    ),
    case(
        "slice-without-devices-does-not-fit",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[])],
        expected=unfit(),
    ),
    case(
        "device-on-other-node-is-not-used",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(node="node-2", devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "picks-the-slice-of-this-node",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(node="node-1", driver=NIC, devices=[dev("nic-0")]),
            slice_(node="node-2", devices=[dev("gpu-0")]),
        ],
        node="node-2",
        expected=ok(res("req-0", "gpu-0", pool="node-2")),
    ),
    case(
        "class-driver-selector-filters-other-drivers",
        claims=[claim("claim-0", req("req-0", "nic"))],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0", "nic-0", driver=NIC)),
    ),
    case(
        "count-two-from-one-slice",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[slice_(devices=devs(3, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "count-equal-to-inventory",
        claims=[claim("claim-0", req("req-0", count=4))],
        slices=[slice_(devices=devs(4, prefix="gpu-"))],
        expected=ok(*[res("req-0", f"gpu-{i}") for i in range(4)]),
    ),
    case(
        "count-above-inventory-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=3))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "count-spans-two-pools",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[dev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-a"), res("req-0", "gpu-0", pool="pool-b")),
    ),
    case(
        "pools-are-tried-in-name-order",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-z", pool="pool-z", devices=[dev("gpu-0")]),
            slice_("s-a", pool="pool-a", devices=[dev("gpu-9")]),
        ],
        expected=ok(res("req-0", "gpu-9", pool="pool-a")),
    ),
    case(
        "drivers-are-tried-in-name-order",
        claims=[claim("claim-0", req("req-0", "any"))],
        classes=[device_class("any", driver=None)],
        slices=[
            slice_(driver=NIC, pool="p", devices=[dev("nic-0")]),
            slice_(driver=GPU, pool="p", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="p")),
    ),
    case(
        "slices-of-a-pool-are-tried-in-name-order",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("b-slice", count=2, devices=[dev("gpu-b")]),
            slice_("a-slice", count=2, devices=[dev("gpu-a")]),
        ],
        expected=ok(res("req-0", "gpu-a")),
    ),
    case(
        "devices-keep-their-order-within-a-slice",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[slice_(devices=[dev("gpu-c"), dev("gpu-a"), dev("gpu-b")])],
        expected=ok(res("req-0", "gpu-c"), res("req-0", "gpu-a")),
    ),
    case(
        "two-requests-get-different-devices",
        claims=[claim("claim-0", req("req-0"), req("req-1"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0"), res("req-1", "gpu-1")),
    ),
    case(
        "two-requests-one-device-does-not-fit",
        claims=[claim("claim-0", req("req-0"), req("req-1"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "requests-of-different-classes",
        claims=[claim("claim-0", req("gpu", "gpu"), req("nic", "nic"))],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("gpu", "gpu-0"), res("nic", "nic-0", driver=NIC)),
    ),
    case(
        "small-and-large-in-order",
        claims=[
            claim("claim-0", req("small", selectors=[_mem("1Gi")]), req("large", selectors=[_mem("2Gi")]))
        ],
        slices=[
            slice_(
                devices=[dev("gpu-s", capacity={"memory": "1Gi"}), dev("gpu-l", capacity={"memory": "2Gi"})]
            )
        ],
        expected=ok(res("small", "gpu-s"), res("large", "gpu-l")),
    ),
    case(
        "small-and-large-needs-backtracking-within-claim",
        claims=[
            claim("claim-0", req("small", selectors=[_mem("1Gi")]), req("large", selectors=[_mem("2Gi")]))
        ],
        slices=[
            slice_(
                devices=[dev("gpu-l", capacity={"memory": "2Gi"}), dev("gpu-s", capacity={"memory": "1Gi"})]
            )
        ],
        expected=ok(res("small", "gpu-s"), res("large", "gpu-l")),
    ),
    case(
        "small-and-large-needs-backtracking-across-claims",
        claims=[
            claim("claim-0", req("small", selectors=[_mem("1Gi")])),
            claim("claim-1", req("large", selectors=[_mem("2Gi")])),
        ],
        slices=[
            slice_(
                devices=[dev("gpu-l", capacity={"memory": "2Gi"}), dev("gpu-s", capacity={"memory": "1Gi"})]
            )
        ],
        expected=ok_many(claim_0=[res("small", "gpu-s")], claim_1=[res("large", "gpu-l")]),
    ),
    case(
        "backtracking-over-count-two",
        claims=[claim("claim-0", req("any", count=2), req("big", selectors=[_mem("8Gi")]))],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", capacity={"memory": "8Gi"}),
                    dev("gpu-1", capacity={"memory": "1Gi"}),
                    dev("gpu-2", capacity={"memory": "1Gi"}),
                ]
            )
        ],
        expected=ok(res("any", "gpu-1"), res("any", "gpu-2"), res("big", "gpu-0")),
    ),
    case(
        "backtracking-exhausted-does-not-fit",
        claims=[claim("claim-0", req("any", count=2), req("big", selectors=[_mem("8Gi")]))],
        slices=[
            slice_(
                devices=[dev("gpu-0", capacity={"memory": "8Gi"}), dev("gpu-1", capacity={"memory": "1Gi"})]
            )
        ],
        expected=unfit(),
    ),
    case(
        "class-selector-on-attribute",
        claims=[claim("claim-0", req("req-0", "a100"))],
        classes=[device_class("a100", selectors=['device.attributes["gpu.example.com"].model == "a100"'])],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "t4"}), dev("gpu-1", attrs={"model": "a100"})])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "request-selector-narrows-class",
        claims=[
            claim("claim-0", req("req-0", selectors=['device.attributes["gpu.example.com"].index == 2']))
        ],
        slices=[slice_(devices=[dev(f"gpu-{i}", attrs={"index": i}) for i in range(4)])],
        expected=ok(res("req-0", "gpu-2")),
    ),
    case(
        "class-and-request-selectors-both-apply",
        claims=[
            claim(
                "claim-0", req("req-0", "a100", selectors=['device.attributes["gpu.example.com"].index > 0'])
            )
        ],
        classes=[device_class("a100", selectors=['device.attributes["gpu.example.com"].model == "a100"'])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"model": "a100", "index": 0}),
                    dev("gpu-1", attrs={"model": "t4", "index": 1}),
                    dev("gpu-2", attrs={"model": "a100", "index": 2}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-2")),
    ),
    case(
        "class-selector-guards-request-selector-missing-key",
        # The class selector is evaluated first: a device without the attribute is
        # filtered out by the class before the request's selector could fail on it.
        claims=[
            claim(
                "claim-0",
                req("req-0", "has-index", selectors=['device.attributes["gpu.example.com"].index == 1']),
            )
        ],
        classes=[device_class("has-index", selectors=['has(device.attributes["gpu.example.com"].index)'])],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1", attrs={"index": 1})])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "selectors-exclude-everything",
        claims=[
            claim("claim-0", req("req-0", selectors=['device.attributes["gpu.example.com"].model == "h100"']))
        ],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "a100"})])],
        expected=unfit(),
    ),
    case(
        "selector-on-unqualified-attribute-uses-driver-domain",
        claims=[claim("claim-0", req("req-0", selectors=['device.attributes["gpu.example.com"].numa == 1']))],
        slices=[slice_(devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 1})])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "selector-on-qualified-attribute-of-other-domain",
        claims=[claim("claim-0", req("req-0", selectors=['device.attributes["example.org"].site == "x"']))],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"example.org/site": "y"}),
                    dev("gpu-1", attrs={"example.org/site": "x"}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "selector-unknown-domain-is-empty-map",
        claims=[
            claim("claim-0", req("req-0", selectors=['!("x" in device.attributes["unknown.example.com"])']))
        ],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "selector-bool-attribute",
        claims=[claim("claim-0", req("req-0", selectors=['device.attributes["gpu.example.com"].healthy']))],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"healthy": False}), dev("gpu-1", attrs={"healthy": True})])
        ],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "selector-version-attribute",
        claims=[
            claim(
                "claim-0",
                req(
                    "req-0",
                    selectors=[
                        'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.5.0"))'
                    ],
                ),
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"driverVersion": {"version": "1.2.0"}}),
                    dev("gpu-1", attrs={"driverVersion": {"version": "2.0.1"}}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "selector-capacity-quantity",
        claims=[claim("claim-0", req("req-0", selectors=[_mem("40Gi")]))],
        slices=[
            slice_(
                devices=[dev("gpu-0", capacity={"memory": "16Gi"}), dev("gpu-1", capacity={"memory": "80Gi"})]
            )
        ],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "selector-on-driver-name",
        claims=[claim("claim-0", req("req-0", "any", selectors=['device.driver == "nic.example.com"']))],
        classes=[device_class("any", driver=None)],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0", "nic-0", driver=NIC)),
    ),
    case(
        "class-without-selectors-matches-every-driver",
        claims=[claim("claim-0", req("req-0", "any", count=2))],
        classes=[device_class("any", driver=None)],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "nic-0", driver=NIC)),
    ),
    case(
        "already-allocated-device-is-skipped",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        allocated=[allocated("old", res("req-0", "gpu-0"))],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "all-devices-allocated-does-not-fit",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        allocated=[allocated("old", res("req-0", "gpu-0"), res("req-0", "gpu-1"))],
        expected=unfit(),
    ),
    case(
        "allocated-device-of-other-pool-same-name-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        allocated=[allocated("old", res("req-0", "gpu-0", pool="node-2"), node="node-2")],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "allocated-device-of-other-driver-same-name-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("dev-0")])],
        allocated=[allocated("old", res("req-0", "dev-0", driver=NIC))],
        expected=ok(res("req-0", "dev-0")),
    ),
    case(
        "two-claims-get-different-devices",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(claim_0=[res("req-0", "gpu-0")], claim_1=[res("req-0", "gpu-1")]),
    ),
    case(
        "two-claims-one-device-neither-is-allocated",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "three-claims-all-or-nothing",
        claims=[
            claim("claim-0", req("req-0")),
            claim("claim-1", req("req-0", count=2)),
            claim("claim-2", req("req-0")),
        ],
        slices=[slice_(devices=devs(3, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "claims-in-different-namespaces",
        claims=[claim("c", req("r")), claim("c", req("r"), namespace="other")],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(c=[res("r", "gpu-0")], **{"other/c": expect(res("r", "gpu-1"))}),
    ),
    case(
        "many-devices-across-many-pools",
        claims=[claim("claim-0", req("req-0", count=6))],
        slices=[slice_(f"s-{p}", pool=f"pool-{p}", devices=devs(2, prefix="gpu-")) for p in "abc"],
        expected=ok(*[res("req-0", f"gpu-{i}", pool=f"pool-{p}") for p in "abc" for i in range(2)]),
    ),
    case(
        "unknown-class-is-an-error",
        claims=[claim("claim-0", req("req-0", "no-such-class"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error("no-such-class"),
    ),
    case(
        "no-classes-at-all-is-an-error",
        claims=[claim("claim-0", req("req-0"))],
        classes=[],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error("gpu"),
    ),
    case(
        "unknown-class-in-second-claim-is-an-error",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0", "missing"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error("missing"),
    ),
    case(
        "request-name-is-kept-as-written",
        claims=[claim("claim-0", req("my-gpu"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("my-gpu", "gpu-0")),
    ),
    case(
        "multi-segment-pool-name",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(pool="cluster.example.com/rack-1", devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0", pool="cluster.example.com/rack-1")),
    ),
]
