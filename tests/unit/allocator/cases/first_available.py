"""firstAvailable (prioritized lists): the first subrequest that leads to a full solution."""

from __future__ import annotations

from ..kit import (
    FPGA,
    GPU,
    NIC,
    allocated,
    case,
    cfg,
    claim,
    claim_config,
    dev,
    device_class,
    devs,
    error,
    first,
    match,
    ok,
    ok_many,
    opaque,
    req,
    res,
    slice_,
    sub,
    unfit,
)

MEM = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("{}")) >= 0'


def _mem(size: str) -> str:
    return MEM.format(size)


CASES = [
    case(
        "first-subrequest-available",
        claims=[claim("claim-0", first("req-0", sub("big", "gpu"), sub("small", "nic")))],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0/big", "gpu-0")),
    ),
    case(
        "first-subrequest-unavailable-second-used",
        claims=[claim("claim-0", first("req-0", sub("a", "nic"), sub("b", "gpu")))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0/b", "gpu-0")),
    ),
    case(
        "third-subrequest-used",
        claims=[claim("claim-0", first("req-0", sub("a", "nic"), sub("b", "fpga"), sub("c", "gpu")))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0/c", "gpu-0")),
    ),
    case(
        "no-subrequest-available",
        claims=[claim("claim-0", first("req-0", sub("a", "nic", count=2), sub("b", "gpu", count=2)))],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=unfit(),
    ),
    case(
        "subrequest-count-falls-back-to-smaller",
        claims=[claim("claim-0", first("req-0", sub("four", count=4), sub("two", count=2)))],
        slices=[slice_(devices=devs(3, prefix="gpu-"))],
        expected=ok(res("req-0/two", "gpu-0"), res("req-0/two", "gpu-1")),
    ),
    case(
        "subrequest-selectors",
        claims=[claim("claim-0", first("req-0", sub("big", selectors=[_mem("80Gi")]), sub("any")))],
        slices=[
            slice_(
                devices=[dev("gpu-0", capacity={"memory": "16Gi"}), dev("gpu-1", capacity={"memory": "80Gi"})]
            )
        ],
        expected=ok(res("req-0/big", "gpu-1")),
    ),
    case(
        "subrequest-selectors-fall-back",
        claims=[claim("claim-0", first("req-0", sub("big", selectors=[_mem("80Gi")]), sub("any")))],
        slices=[
            slice_(
                devices=[dev("gpu-0", capacity={"memory": "16Gi"}), dev("gpu-1", capacity={"memory": "40Gi"})]
            )
        ],
        expected=ok(res("req-0/any", "gpu-0")),
    ),
    case(
        "first-subrequest-chosen-only-if-whole-claim-fits",
        # Taking the big device for the first subrequest would starve req-1: the next
        # subrequest is used instead.
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("big", selectors=[_mem("8Gi")]), sub("mid", selectors=[_mem("4Gi")])),
                req("req-1", selectors=[_mem("8Gi")]),
            )
        ],
        slices=[
            slice_("s-1", pool="pool-1", devices=[dev("gpu-8", capacity={"memory": "8Gi"})]),
            slice_("s-2", pool="pool-2", devices=[dev("gpu-4", capacity={"memory": "4Gi"})]),
        ],
        expected=ok(res("req-0/mid", "gpu-4", pool="pool-2"), res("req-1", "gpu-8", pool="pool-1")),
    ),
    case(
        "first-subrequest-chosen-only-if-other-claim-fits",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("big", selectors=[_mem("8Gi")]), sub("mid", selectors=[_mem("4Gi")])),
            ),
            claim("claim-1", req("req-0", selectors=[_mem("8Gi")])),
        ],
        slices=[
            slice_(
                devices=[dev("gpu-8", capacity={"memory": "8Gi"}), dev("gpu-4", capacity={"memory": "4Gi"})]
            )
        ],
        expected=ok_many(claim_0=[res("req-0/mid", "gpu-4")], claim_1=[res("req-0", "gpu-8")]),
    ),
    case(
        "two-prioritized-requests",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", "nic"), sub("b", "gpu")),
                first("req-1", sub("a", "fpga"), sub("b", "gpu")),
            )
        ],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0/b", "gpu-0"), res("req-1/b", "gpu-1")),
    ),
    case(
        "plain-request-then-prioritized",
        claims=[claim("claim-0", req("req-0"), first("req-1", sub("a", count=2), sub("b")))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0"), res("req-1/b", "gpu-1")),
    ),
    case(
        "subrequest-all-mode-first",
        claims=[claim("claim-0", first("req-0", sub("all", all=True), sub("one")))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0/all", "gpu-0"), res("req-0/all", "gpu-1")),
    ),
    case(
        "subrequest-all-mode-blocked-by-allocated-device",
        claims=[claim("claim-0", first("req-0", sub("all", all=True), sub("one")))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=ok(res("req-0/one", "gpu-1")),
    ),
    case(
        "subrequest-all-mode-after-another-request",
        claims=[claim("claim-0", req("req-0"), first("req-1", sub("all", all=True), sub("one")))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0"), res("req-1/one", "gpu-1")),
    ),
    case(
        "subrequest-all-mode-with-selectors",
        claims=[
            claim(
                "claim-0",
                first(
                    "req-0",
                    sub("all-a", all=True, selectors=['device.attributes["gpu.example.com"].model == "a"']),
                    sub("one"),
                ),
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"model": "b"}),
                    dev("gpu-1", attrs={"model": "a"}),
                    dev("gpu-2", attrs={"model": "a"}),
                ]
            )
        ],
        expected=ok(res("req-0/all-a", "gpu-1"), res("req-0/all-a", "gpu-2")),
    ),
    case(
        "subrequest-all-mode-nothing-matches-falls-back",
        claims=[claim("claim-0", first("req-0", sub("all", "nic", all=True), sub("one")))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0/one", "gpu-0")),
    ),
    case(
        "subrequest-too-many-devices-falls-back",
        # A subrequest that alone asks for more than the result limit is just not chosen.
        claims=[claim("claim-0", first("req-0", sub("huge", count=500), sub("one")))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0/one", "gpu-0")),
    ),
    case(
        "prioritized-lists-backtrack-over-the-result-limit",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("full", count=32), sub("half", count=16)),
                first("req-1", sub("full", count=32), sub("half", count=16)),
            )
        ],
        slices=[slice_(devices=devs(64, prefix="gpu-"))],
        expected=ok(
            *[res("req-0/half", f"gpu-{i}") for i in range(16)],
            *[res("req-1/half", f"gpu-{i}") for i in range(16, 32)],
        ),
    ),
    case(
        "prioritized-smallest-subrequest-over-limit-is-an-error",
        claims=[claim("claim-0", first("req-0", sub("a", count=33), sub("b", count=40)))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=error("32"),
    ),
    case(
        "prioritized-all-subrequest-or-two",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("all", all=True), sub("two", count=2)),
                req("req-1", "nic", count=2),
            )
        ],
        slices=[slice_(devices=devs(31, prefix="gpu-")), slice_(driver=NIC, devices=devs(2, prefix="nic-"))],
        expected=ok(
            res("req-0/two", "gpu-0"),
            res("req-0/two", "gpu-1"),
            res("req-1", "nic-0", driver=NIC),
            res("req-1", "nic-1", driver=NIC),
        ),
    ),
    case(
        "subrequest-tolerations-are-copied",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", "nic"), sub("b", tolerations=[{"key": "k", "operator": "Exists"}])),
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", taints=[{"key": "k", "effect": "NoSchedule"}])])],
        expected=ok(res("req-0/b", "gpu-0", tolerations=[{"key": "k", "operator": "Exists"}])),
    ),
    case(
        "match-constraint-on-parent-covers-subrequests",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", count=2), sub("b")),
                req("req-1", "nic"),
                constraints=[match("example.com/numa", "req-0", "req-1")],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"example.com/numa": 0}),
                    dev("gpu-1", attrs={"example.com/numa": 1}),
                ]
            ),
            slice_(driver=NIC, devices=[dev("nic-0", attrs={"example.com/numa": 1})]),
        ],
        expected=ok(res("req-0/b", "gpu-1"), res("req-1", "nic-0", driver=NIC)),
    ),
    case(
        "match-constraint-on-one-subrequest-only",
        # The constraint names req-0/a only; when req-0/b is chosen it does not apply.
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", "fpga"), sub("b")),
                req("req-1", "nic"),
                constraints=[match("example.com/numa", "req-0/a", "req-1")],
            )
        ],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"example.com/numa": 0})]),
            slice_(driver=NIC, devices=[dev("nic-0", attrs={"example.com/numa": 1})]),
        ],
        expected=ok(res("req-0/b", "gpu-0"), res("req-1", "nic-0", driver=NIC)),
    ),
    case(
        "match-constraint-on-chosen-subrequest-applies",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", "fpga"), sub("b")),
                req("req-1", "nic"),
                constraints=[match("example.com/numa", "req-0/b", "req-1")],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"example.com/numa": 0}),
                    dev("gpu-1", attrs={"example.com/numa": 1}),
                ]
            ),
            slice_(driver=NIC, devices=[dev("nic-0", attrs={"example.com/numa": 1})]),
        ],
        expected=ok(res("req-0/b", "gpu-1"), res("req-1", "nic-0", driver=NIC)),
    ),
    case(
        "constraint-failure-moves-to-next-subrequest",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("gpu", "gpu"), sub("fpga", "fpga")),
                req("req-1", "nic"),
                constraints=[match("example.com/numa")],
            )
        ],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"example.com/numa": 0})]),
            slice_(driver=FPGA, devices=[dev("fpga-0", attrs={"example.com/numa": 1})]),
            slice_(driver=NIC, devices=[dev("nic-0", attrs={"example.com/numa": 1})]),
        ],
        expected=ok(res("req-0/fpga", "fpga-0", driver=FPGA), res("req-1", "nic-0", driver=NIC)),
    ),
    case(
        "claim-config-of-chosen-subrequest-kept",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", "nic"), sub("b")),
                config=[claim_config(NIC, {"x": 1}, "req-0/a"), claim_config(GPU, {"y": 2}, "req-0/b")],
            )
        ],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0/b", "gpu-0"), config=[cfg("FromClaim", GPU, {"y": 2})]),
    ),
    case(
        "claim-config-of-parent-request-kept",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", "nic"), sub("b")),
                req("req-1"),
                config=[claim_config(GPU, {"y": 2}, "req-0")],
            )
        ],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(
            res("req-0/b", "gpu-0"),
            res("req-1", "gpu-1"),
            config=[cfg("FromClaim", GPU, {"y": 2}, ["req-0"])],
        ),
    ),
    case(
        "claim-config-naming-both-subrequests-keeps-its-list",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a"), sub("b", "nic")),
                req("req-1"),
                config=[claim_config(GPU, {"s": 1}, "req-0/a", "req-0/b")],
            )
        ],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(
            res("req-0/a", "gpu-0"),
            res("req-1", "gpu-1"),
            config=[cfg("FromClaim", GPU, {"s": 1}, ["req-0/a", "req-0/b"])],
        ),
    ),
    case(
        "claim-config-covering-every-request-via-subrequest-is-cleared",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a"), sub("b", "nic")),
                req("req-1"),
                config=[claim_config(GPU, {"all": True}, "req-0/a", "req-1")],
            )
        ],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(
            res("req-0/a", "gpu-0"), res("req-1", "gpu-1"), config=[cfg("FromClaim", GPU, {"all": True})]
        ),
    ),
    case(
        "class-config-of-chosen-subrequest-class",
        claims=[claim("claim-0", first("req-0", sub("a", "nic-cfg", count=2), sub("b", "gpu-cfg", count=2)))],
        classes=[
            device_class("nic-cfg", driver=NIC, config=[opaque(NIC, {"c": "nic"})]),
            device_class("gpu-cfg", driver=GPU, config=[opaque(GPU, {"c": "gpu"})]),
        ],
        slices=[slice_(devices=devs(2, prefix="gpu-")), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(
            res("req-0/b", "gpu-0"), res("req-0/b", "gpu-1"), config=[cfg("FromClass", GPU, {"c": "gpu"})]
        ),
    ),
    case(
        "class-config-names-the-subrequest",
        claims=[claim("claim-0", first("req-0", sub("a", "gpu-cfg")), req("req-1", "nic"))],
        classes=[
            device_class("gpu-cfg", driver=GPU, config=[opaque(GPU, {"c": "gpu"})]),
            device_class("nic", driver=NIC),
        ],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(
            res("req-0/a", "gpu-0"),
            res("req-1", "nic-0", driver=NIC),
            config=[cfg("FromClass", GPU, {"c": "gpu"}, ["req-0/a"])],
        ),
    ),
    case(
        "prioritized-across-claims-first-claim-falls-back",
        claims=[
            claim("claim-0", first("req-0", sub("two", count=2), sub("one"))),
            claim("claim-1", req("req-0")),
        ],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(claim_0=[res("req-0/one", "gpu-0")], claim_1=[res("req-0", "gpu-1")]),
    ),
    case(
        "prioritized-eight-subrequests-last-wins",
        claims=[claim("claim-0", first("req-0", *[sub(f"s{i}", "nic") for i in range(7)], sub("s7", "gpu")))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0/s7", "gpu-0")),
    ),
]
