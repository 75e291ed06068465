"""Selector expressions the DRA CEL environment offers, and search across slices, pools,
requests and claims where only some combinations work."""

from __future__ import annotations

from ..kit import (
    FPGA,
    NIC,
    allocated,
    case,
    claim,
    counter_set,
    dev,
    device_class,
    distinct,
    first,
    match,
    ok,
    ok_many,
    req,
    res,
    slice_,
    sub,
    taint,
    taint_rule,
    tol,
    unfit,
    ver,
)

A = 'device.attributes["gpu.example.com"]'
C = 'device.capacity["gpu.example.com"]'

# Two devices; each expression is true for exactly one of them (the one named in the pair).
TWO = [
    dev(
        "gpu-old",
        attrs={"model": "t4", "v": ver("1.9.3"), "links": ["y"], "index": 0},
        capacity={"memory": "16Gi"},
    ),
    dev(
        "gpu-new",
        attrs={"model": "a100", "v": ver("2.1.0"), "links": ["x", "y"], "index": 1},
        capacity={"memory": "80Gi"},
    ),
]
SELECTOR_CASES = [
    ("list-includes", f'{A}.links.includes("x")', "gpu-new"),
    ("list-in-operator", f'"x" in {A}.links', "gpu-new"),
    ("semver-major", f"{A}.v.major() >= 2", "gpu-new"),
    ("semver-is-less-than", f'{A}.v.isLessThan(semver("2.0.0"))', "gpu-old"),
    ("semver-compare-to", f'{A}.v.compareTo(semver("2.1.0")) == 0', "gpu-new"),
    ("quantity-is-greater-than", f'{C}.memory.isGreaterThan(quantity("20Gi"))', "gpu-new"),
    ("quantity-is-less-than", f'{C}.memory.isLessThan(quantity("20Gi"))', "gpu-old"),
    ("quantity-compare-equal", f'{C}.memory.compareTo(quantity("16Gi")) == 0', "gpu-old"),
    ("optional-chaining-or-value", f'{A}.?missing.orValue("none") == "none" && {A}.index == 1', "gpu-new"),
    ("cel-bind", f'cel.bind(a, {A}, a.model == "t4")', "gpu-old"),
    ("string-starts-with", f'{A}.model.startsWith("a1")', "gpu-new"),
    ("string-matches", f'{A}.model.matches("^t[0-9]$")', "gpu-old"),
    ("int-arithmetic", f"{A}.index + 1 == 2", "gpu-new"),
    ("negation", f'!({A}.model == "t4")', "gpu-new"),
    ("logical-or", f'{A}.model == "none" || {A}.index == 0', "gpu-old"),
    ("string-size", f"size({A}.model) == 2", "gpu-old"),
    ("list-size", f"size({A}.links) == 2", "gpu-new"),
    ("domain-map-has", f"has({A}.model) && {A}.index == 0", "gpu-old"),
]

CASES = [
    *[
        case(
            f"selector-{name}",
            claims=[claim("claim-0", req("req-0", selectors=[expression]))],
            slices=[slice_(devices=TWO)],
            expected=ok(res("req-0", want)),
        )
        for name, expression, want in SELECTOR_CASES
    ],
    case(
        "selectors-in-class-and-request-are-anded",
        claims=[claim("claim-0", req("req-0", "new", selectors=[f'{A}.links.includes("y")']))],
        classes=[device_class("new", selectors=[f"{A}.v.major() >= 2"])],
        slices=[slice_(devices=TWO)],
        expected=ok(res("req-0", "gpu-new")),
    ),
    case(
        "several-request-selectors-are-anded",
        claims=[claim("claim-0", req("req-0", selectors=[f"{A}.index >= 0", f'{A}.model == "t4"']))],
        slices=[slice_(devices=TWO)],
        expected=ok(res("req-0", "gpu-old")),
    ),
    # ------------------------------------------------------------ combinations
    case(
        "combination-within-one-request-across-slices",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/numa")])],
        slices=[
            slice_(
                "s-1", count=2, devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 1})]
            ),
            slice_(
                "s-2", count=2, devices=[dev("gpu-2", attrs={"numa": 2}), dev("gpu-3", attrs={"numa": 1})]
            ),
        ],
        expected=ok(res("req-0", "gpu-1"), res("req-0", "gpu-3")),
    ),
    case(
        "combination-within-one-request-across-pools",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/numa")])],
        slices=[
            slice_(
                "s-a",
                pool="pool-a",
                devices=[dev("gpu-0", attrs={"numa": 0}), dev("gpu-1", attrs={"numa": 1})],
            ),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0", attrs={"numa": 2})]),
            slice_("s-c", pool="pool-c", devices=[dev("gpu-0", attrs={"numa": 1})]),
        ],
        expected=ok(res("req-0", "gpu-1", pool="pool-a"), res("req-0", "gpu-0", pool="pool-c")),
    ),
    case(
        "combination-three-of-five",
        claims=[claim("claim-0", req("req-0", count=3), constraints=[match("gpu.example.com/numa")])],
        slices=[slice_(devices=[dev(f"gpu-{i}", attrs={"numa": n}) for i, n in enumerate([0, 1, 0, 1, 1])])],
        expected=ok(res("req-0", "gpu-1"), res("req-0", "gpu-3"), res("req-0", "gpu-4")),
    ),
    case(
        "combination-no-three-share-a-value",
        claims=[claim("claim-0", req("req-0", count=3), constraints=[match("gpu.example.com/numa")])],
        slices=[slice_(devices=[dev(f"gpu-{i}", attrs={"numa": n}) for i, n in enumerate([0, 1, 0, 1, 2])])],
        expected=unfit(),
    ),
    case(
        "backtracking-over-three-requests",
        claims=[
            claim(
                "claim-0",
                req("a"),
                req("b", selectors=[f'{A}.kind == "x"']),
                req("c", selectors=[f'{A}.kind == "y"']),
                constraints=[match("gpu.example.com/numa")],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0, "kind": "x"}),
                    dev("gpu-1", attrs={"numa": 1, "kind": "y"}),
                    dev("gpu-2", attrs={"numa": 1, "kind": "x"}),
                    dev("gpu-3", attrs={"numa": 1, "kind": "z"}),
                ]
            )
        ],
        expected=ok(res("a", "gpu-3"), res("b", "gpu-2"), res("c", "gpu-1")),
    ),
    case(
        "backtracking-across-claims-with-constraints",
        claims=[
            claim("claim-0", req("a")),
            claim("claim-1", req("a"), req("b"), constraints=[match("gpu.example.com/numa")]),
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 1}),
                    dev("gpu-2", attrs={"numa": 0}),
                ]
            )
        ],
        expected=ok_many(claim_0=[res("a", "gpu-1")], claim_1=[res("a", "gpu-0"), res("b", "gpu-2")]),
    ),
    case(
        "backtracking-across-claims-and-drivers",
        claims=[
            claim("claim-0", req("any", "any")),
            claim("claim-1", req("gpu"), req("nic", "nic"), constraints=[match("example.com/pcie")]),
        ],
        classes=[device_class("any", driver=None), device_class("gpu"), device_class("nic", driver=NIC)],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"example.com/pcie": "p0"})]),
            slice_(
                driver=NIC,
                devices=[
                    dev("nic-0", attrs={"example.com/pcie": "p0"}),
                    dev("nic-1", attrs={"example.com/pcie": "p1"}),
                ],
            ),
        ],
        expected=ok_many(
            claim_0=[res("any", "nic-1", driver=NIC)],
            claim_1=[res("gpu", "gpu-0"), res("nic", "nic-0", driver=NIC)],
        ),
    ),
    case(
        "prioritized-list-combined-with-backtracking-in-later-claim",
        claims=[
            claim("claim-0", first("r", sub("two", count=2), sub("one"))),
            claim("claim-1", req("r", count=2)),
        ],
        slices=[slice_(devices=[dev(f"gpu-{i}") for i in range(3)])],
        expected=ok_many(claim_0=[res("r/one", "gpu-0")], claim_1=[res("r", "gpu-1"), res("r", "gpu-2")]),
    ),
    case(
        "distinct-and-counters-together",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/parent")])],
        slices=[
            slice_(
                "a-counters",
                count=2,
                shared_counters=[counter_set("g0", {"mem": "8Gi"}), counter_set("g1", {"mem": "8Gi"})],
            ),
            slice_(
                "b-devices",
                count=2,
                devices=[
                    dev("g0-a", attrs={"parent": 0}, consumes={"g0": {"mem": "4Gi"}}),
                    dev("g0-b", attrs={"parent": 0}, consumes={"g0": {"mem": "4Gi"}}),
                    dev("g1-a", attrs={"parent": 1}, consumes={"g1": {"mem": "4Gi"}}),
                ],
            ),
        ],
        expected=ok(res("req-0", "g0-a"), res("req-0", "g1-a")),
    ),
    case(
        "taint-rule-blocks-all-mode",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1")])],
        taint_rules=[taint_rule("r", taint("maint", "NoExecute"), device="gpu-1")],
        expected=unfit(),
    ),
    case(
        "taint-rule-tolerated-in-prioritized-subrequest",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("strict"), sub("lenient", tolerations=[tol("maint", op="Exists")])),
            )
        ],
        slices=[slice_(devices=[dev("gpu-0")])],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), driver="gpu.example.com")],
        expected=ok(res("req-0/lenient", "gpu-0", tolerations=[tol("maint", op="Exists")])),
    ),
    case(
        "counters-push-to-next-subrequest",
        claims=[claim("claim-0", first("req-0", sub("part", "part"), sub("fpga", "fpga")))],
        classes=[device_class("part"), device_class("fpga", driver=FPGA)],
        slices=[
            slice_("a-counters", count=2, shared_counters=[counter_set("cs", {"mem": "4Gi"})]),
            slice_(
                "b-devices",
                count=2,
                devices=[
                    dev("p-0", consumes={"cs": {"mem": "4Gi"}}),
                    dev("p-1", consumes={"cs": {"mem": "1Gi"}}),
                ],
            ),
            slice_(driver=FPGA, devices=[dev("fpga-0")]),
        ],
        allocated=[allocated("old", res("r", "p-0"))],
        expected=ok(res("req-0/fpga", "fpga-0", driver=FPGA)),
    ),
    case(
        "same-device-name-in-two-pools-two-claims",
        claims=[claim("claim-0", req("r")), claim("claim-1", req("r"))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[dev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok_many(
            claim_0=[res("r", "gpu-0", pool="pool-a")], claim_1=[res("r", "gpu-0", pool="pool-b")]
        ),
    ),
    case(
        "devices-in-use-spread-over-pools",
        claims=[claim("claim-0", req("r", count=2))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[dev("gpu-0"), dev("gpu-1")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0"), dev("gpu-1")]),
        ],
        allocated=[allocated("old", res("x", "gpu-0", pool="pool-a"), res("x", "gpu-1", pool="pool-b"))],
        expected=ok(res("r", "gpu-1", pool="pool-a"), res("r", "gpu-0", pool="pool-b")),
    ),
]
