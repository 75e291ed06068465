"""Device taints (from slices and DeviceTaintRules) and request tolerations."""

from __future__ import annotations

from ..kit import (
    FPGA,
    NIC,
    case,
    claim,
    dev,
    devs,
    first,
    ok,
    req,
    res,
    slice_,
    sub,
    taint,
    taint_rule,
    tol,
    unfit,
)


def _tainted(*taints: dict, name: str = "gpu-0") -> list[dict]:
    return [slice_(devices=[dev(name, taints=list(taints))])]


CASES = [
    case(
        "no-schedule-taint-blocks",
        claims=[claim("claim-0", req("req-0"))],
        slices=_tainted(taint("broken", "NoSchedule")),
        expected=unfit(),
    ),
    case(
        "no-execute-taint-blocks",
        claims=[claim("claim-0", req("req-0"))],
        slices=_tainted(taint("broken", "NoExecute")),
        expected=unfit(),
    ),
    case(
        "none-effect-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=_tainted(taint("info", "None")),
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "unknown-effect-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=_tainted(taint("future", "PreferNoSchedule")),
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "tainted-device-skipped-clean-device-used",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0", taints=[taint("broken", "NoSchedule")]), dev("gpu-1")])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "two-tainted-devices-count-two-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", taints=[taint("a", "NoSchedule")]),
                    dev("gpu-1", taints=[taint("b", "NoExecute")]),
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "exists-toleration-matches-any-value",
        claims=[
            claim("claim-0", req("req-0", tolerations=[tol("broken", op="Exists", effect="NoSchedule")]))
        ],
        slices=_tainted(taint("broken", "NoSchedule", value="yes")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("broken", op="Exists", effect="NoSchedule")])),
    ),
    case(
        "equal-toleration-matching-value",
        claims=[
            claim(
                "claim-0",
                req("req-0", tolerations=[tol("broken", op="Equal", value="v2", effect="NoExecute")]),
            )
        ],
        slices=_tainted(taint("broken", "NoExecute", value="v2")),
        expected=ok(
            res("req-0", "gpu-0", tolerations=[tol("broken", op="Equal", value="v2", effect="NoExecute")])
        ),
    ),
    case(
        "equal-toleration-other-value-does-not-tolerate",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("broken", op="Equal", value="v1")]))],
        slices=_tainted(taint("broken", "NoExecute", value="v2")),
        expected=unfit(),
    ),
    case(
        "default-operator-is-equal",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("broken", value="v1")]))],
        slices=_tainted(taint("broken", "NoSchedule", value="v2")),
        expected=unfit(),
    ),
    case(
        "default-operator-equal-matching",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("broken", value="v1")]))],
        slices=_tainted(taint("broken", "NoSchedule", value="v1")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("broken", op="Equal", value="v1")])),
    ),
    case(
        "equal-toleration-empty-value-matches-taint-without-value",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("broken", op="Equal")]))],
        slices=_tainted(taint("broken", "NoSchedule")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("broken", op="Equal")])),
    ),
    case(
        "toleration-other-key-does-not-tolerate",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("other", op="Exists")]))],
        slices=_tainted(taint("broken", "NoSchedule")),
        expected=unfit(),
    ),
    case(
        "empty-key-exists-tolerates-everything",
        claims=[claim("claim-0", req("req-0", tolerations=[tol(op="Exists")]))],
        slices=_tainted(taint("a", "NoSchedule"), taint("b", "NoExecute", value="x")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol(op="Exists")])),
    ),
    case(
        "empty-key-exists-with-effect-only-that-effect",
        claims=[claim("claim-0", req("req-0", tolerations=[tol(op="Exists", effect="NoSchedule")]))],
        slices=_tainted(taint("a", "NoSchedule"), taint("b", "NoExecute")),
        expected=unfit(),
    ),
    case(
        "empty-effect-tolerates-every-effect",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("broken", op="Exists")]))],
        slices=_tainted(taint("broken", "NoSchedule"), taint("broken", "NoExecute")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("broken", op="Exists")])),
    ),
    case(
        "effect-mismatch-does-not-tolerate",
        claims=[
            claim("claim-0", req("req-0", tolerations=[tol("broken", op="Exists", effect="NoSchedule")]))
        ],
        slices=_tainted(taint("broken", "NoExecute")),
        expected=unfit(),
    ),
    case(
        "each-taint-needs-its-own-toleration",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("a", op="Exists")]))],
        slices=_tainted(taint("a", "NoSchedule"), taint("b", "NoSchedule")),
        expected=unfit(),
    ),
    case(
        "two-tolerations-for-two-taints",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("a", op="Exists"), tol("b", op="Exists")]))],
        slices=_tainted(taint("a", "NoSchedule"), taint("b", "NoExecute")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("a", op="Exists"), tol("b", op="Exists")])),
    ),
    case(
        "untolerated-none-taint-beside-tolerated-blocking-taint",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("a", op="Exists")]))],
        slices=_tainted(taint("a", "NoExecute"), taint("info", "None")),
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("a", op="Exists")])),
    ),
    case(
        "toleration-seconds-still-tolerates-for-allocation",
        claims=[
            claim(
                "claim-0", req("req-0", tolerations=[tol("a", op="Exists", effect="NoExecute", seconds=30)])
            )
        ],
        slices=_tainted(taint("a", "NoExecute")),
        expected=ok(
            res("req-0", "gpu-0", tolerations=[tol("a", op="Exists", effect="NoExecute", seconds=30)])
        ),
    ),
    case(
        "tolerations-copied-even-without-taints",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("a", op="Exists")]))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("a", op="Exists")])),
    ),
    case(
        "tolerations-only-on-the-request-that-has-them",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("a", op="Exists")]), req("req-1"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("a", op="Exists")]), res("req-1", "gpu-1")),
    ),
    case(
        "all-mode-with-tainted-device-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1", taints=[taint("broken", "NoSchedule")])])],
        expected=unfit(),
    ),
    case(
        "all-mode-with-tolerated-taint",
        claims=[claim("claim-0", req("req-0", all=True, tolerations=[tol("broken", op="Exists")]))],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1", taints=[taint("broken", "NoSchedule")])])],
        expected=ok(
            res("req-0", "gpu-0", tolerations=[tol("broken", op="Exists")]),
            res("req-0", "gpu-1", tolerations=[tol("broken", op="Exists")]),
        ),
    ),
    case(
        "prioritized-list-falls-back-on-taint",
        claims=[claim("claim-0", first("req-0", sub("gpu"), sub("nic", "nic")))],
        slices=[*_tainted(taint("broken", "NoSchedule")), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0/nic", "nic-0", driver=NIC)),
    ),
    case(
        "prioritized-subrequest-toleration",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("gpu", tolerations=[tol("broken", op="Exists")]), sub("nic", "nic")),
            )
        ],
        slices=[*_tainted(taint("broken", "NoSchedule")), slice_(driver=NIC, devices=[dev("nic-0")])],
        expected=ok(res("req-0/gpu", "gpu-0", tolerations=[tol("broken", op="Exists")])),
    ),
    # ----------------------------------------------------------- DeviceTaintRules
    case(
        "rule-by-device-blocks",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        taint_rules=[
            taint_rule(
                "r", taint("maint", "NoSchedule"), driver="gpu.example.com", pool="node-1", device="gpu-0"
            )
        ],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "rule-by-driver-blocks-all-of-driver",
        claims=[claim("claim-0", req("req-0", "any"))],
        classes=[
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "any"},
                "spec": {},
            }
        ],
        slices=[slice_(devices=[dev("gpu-0")]), slice_(driver=FPGA, devices=[dev("fpga-0")])],
        taint_rules=[taint_rule("r", taint("maint", "NoExecute"), driver="gpu.example.com")],
        expected=ok(res("req-0", "fpga-0", driver=FPGA)),
    ),
    case(
        "rule-by-pool-blocks-pool",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[dev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), pool="pool-a")],
        expected=ok(res("req-0", "gpu-0", pool="pool-b")),
    ),
    case(
        "rule-with-none-effect-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        taint_rules=[taint_rule("r", taint("note", "None"), device="gpu-0")],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "rule-with-empty-selector-matches-every-device",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"))],
        expected=unfit(),
    ),
    case(
        "rule-without-selector-matches-no-device",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), no_selector=True)],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "rule-for-other-device-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), device="gpu-9")],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "rule-taint-tolerated",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("maint", op="Exists")]))],
        slices=[slice_(devices=[dev("gpu-0")])],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), device="gpu-0")],
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("maint", op="Exists")])),
    ),
    case(
        "rule-and-slice-taint-same-key-both-tolerated-by-one-toleration",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("maint", op="Exists")]))],
        slices=_tainted(taint("maint", "NoExecute")),
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), device="gpu-0")],
        expected=ok(res("req-0", "gpu-0", tolerations=[tol("maint", op="Exists")])),
    ),
    case(
        "rule-and-slice-taint-each-needs-toleration",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("maint", op="Exists", effect="NoExecute")]))],
        slices=_tainted(taint("maint", "NoExecute")),
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), device="gpu-0")],
        expected=unfit(),
    ),
    case(
        "two-rules-cumulative",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("a", op="Exists")]))],
        slices=[slice_(devices=[dev("gpu-0")])],
        taint_rules=[
            taint_rule("r-a", taint("a", "NoSchedule"), device="gpu-0"),
            taint_rule("r-b", taint("b", "NoSchedule"), device="gpu-0"),
        ],
        expected=unfit(),
    ),
    case(
        "rule-on-driver-and-device-both-must-match",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("dev-0")])],
        taint_rules=[taint_rule("r", taint("maint", "NoSchedule"), driver=NIC, device="dev-0")],
        expected=ok(res("req-0", "dev-0")),
    ),
]
