"""The shape of the AllocationResult: results order and the config list (FromClass,
FromClaim, `requests` cleared when a config covers every request)."""

from __future__ import annotations

from ..kit import (
    FPGA,
    GPU,
    NIC,
    case,
    cfg,
    claim,
    claim_config,
    dev,
    device_class,
    devs,
    expect,
    ok,
    ok_many,
    opaque,
    req,
    res,
    slice_,
)

CLASSES = [
    device_class("gpu", driver=GPU, config=[opaque(GPU, {"from": "gpu-class"})]),
    device_class("gpu-plain", driver=GPU),
    device_class("nic", driver=NIC, config=[opaque(NIC, {"from": "nic-class"})]),
    device_class("fpga", driver=FPGA, config=[opaque(FPGA, {"n": 1}), opaque(FPGA, {"n": 2})]),
]
SLICES = [
    slice_(devices=devs(4, prefix="gpu-")),
    slice_(driver=NIC, devices=devs(2, prefix="nic-")),
    slice_(driver=FPGA, devices=devs(2, prefix="fpga-")),
]


def _case(id: str, *, claims: list, expected: object) -> object:
    return case(id, claims=claims, classes=CLASSES, slices=SLICES, expected=expected)  # type: ignore[arg-type]


CASES = [
    _case(
        "no-config-anywhere",
        claims=[claim("claim-0", req("req-0", "gpu-plain"))],
        expected=ok(res("req-0", "gpu-0"), config=[]),
    ),
    _case(
        "class-config-single-request-applies-to-all",
        claims=[claim("claim-0", req("req-0", "gpu"))],
        expected=ok(res("req-0", "gpu-0"), config=[cfg("FromClass", GPU, {"from": "gpu-class"})]),
    ),
    _case(
        "class-config-two-requests-same-class-applies-to-all",
        claims=[claim("claim-0", req("a", "gpu"), req("b", "gpu"))],
        expected=ok(
            res("a", "gpu-0"), res("b", "gpu-1"), config=[cfg("FromClass", GPU, {"from": "gpu-class"})]
        ),
    ),
    _case(
        "class-config-listed-once-per-class-with-its-requests",
        claims=[claim("claim-0", req("a", "gpu"), req("b", "nic"), req("c", "gpu"))],
        expected=ok(
            res("a", "gpu-0"),
            res("b", "nic-0", driver=NIC),
            res("c", "gpu-1"),
            config=[
                cfg("FromClass", GPU, {"from": "gpu-class"}, ["a", "c"]),
                cfg("FromClass", NIC, {"from": "nic-class"}, ["b"]),
            ],
        ),
    ),
    _case(
        "class-configs-in-request-order",
        claims=[claim("claim-0", req("a", "nic"), req("b", "gpu"))],
        expected=ok(
            res("a", "nic-0", driver=NIC),
            res("b", "gpu-0"),
            config=[
                cfg("FromClass", NIC, {"from": "nic-class"}, ["a"]),
                cfg("FromClass", GPU, {"from": "gpu-class"}, ["b"]),
            ],
        ),
    ),
    _case(
        "class-with-two-configs",
        claims=[claim("claim-0", req("a", "fpga"), req("b", "gpu-plain"))],
        expected=ok(
            res("a", "fpga-0", driver=FPGA),
            res("b", "gpu-0"),
            config=[cfg("FromClass", FPGA, {"n": 1}, ["a"]), cfg("FromClass", FPGA, {"n": 2}, ["a"])],
        ),
    ),
    _case(
        "class-with-two-configs-two-requests",
        claims=[claim("claim-0", req("a", "fpga"), req("b", "fpga"), req("c", "gpu-plain"))],
        expected=ok(
            res("a", "fpga-0", driver=FPGA),
            res("b", "fpga-1", driver=FPGA),
            res("c", "gpu-0"),
            config=[
                cfg("FromClass", FPGA, {"n": 1}, ["a", "b"]),
                cfg("FromClass", FPGA, {"n": 2}, ["a", "b"]),
            ],
        ),
    ),
    _case(
        "claim-config-without-requests",
        claims=[
            claim(
                "claim-0", req("a", "gpu-plain"), req("b", "gpu-plain"), config=[claim_config(GPU, {"c": 1})]
            )
        ],
        expected=ok(res("a", "gpu-0"), res("b", "gpu-1"), config=[cfg("FromClaim", GPU, {"c": 1})]),
    ),
    _case(
        "claim-config-for-some-requests",
        claims=[
            claim(
                "claim-0",
                req("a", "gpu-plain"),
                req("b", "gpu-plain"),
                req("c", "gpu-plain"),
                config=[claim_config(GPU, {"c": 1}, "a", "b")],
            )
        ],
        expected=ok(
            res("a", "gpu-0"),
            res("b", "gpu-1"),
            res("c", "gpu-2"),
            config=[cfg("FromClaim", GPU, {"c": 1}, ["a", "b"])],
        ),
    ),
    _case(
        "claim-config-naming-every-request-is-cleared",
        claims=[
            claim(
                "claim-0",
                req("a", "gpu-plain"),
                req("b", "gpu-plain"),
                config=[claim_config(GPU, {"c": 1}, "a", "b")],
            )
        ],
        expected=ok(res("a", "gpu-0"), res("b", "gpu-1"), config=[cfg("FromClaim", GPU, {"c": 1})]),
    ),
    _case(
        "class-configs-before-claim-configs",
        claims=[
            claim(
                "claim-0",
                req("a", "gpu"),
                req("b", "nic"),
                config=[claim_config(NIC, {"mine": True}, "b"), claim_config(GPU, {"all": True})],
            )
        ],
        expected=ok(
            res("a", "gpu-0"),
            res("b", "nic-0", driver=NIC),
            config=[
                cfg("FromClass", GPU, {"from": "gpu-class"}, ["a"]),
                cfg("FromClass", NIC, {"from": "nic-class"}, ["b"]),
                cfg("FromClaim", NIC, {"mine": True}, ["b"]),
                cfg("FromClaim", GPU, {"all": True}),
            ],
        ),
    ),
    _case(
        "claim-configs-keep-their-order",
        claims=[
            claim(
                "claim-0",
                req("a", "gpu-plain"),
                config=[
                    claim_config(GPU, {"n": 2}),
                    claim_config(GPU, {"n": 1}),
                    claim_config(GPU, {"n": 3}),
                ],
            )
        ],
        expected=ok(
            res("a", "gpu-0"),
            config=[
                cfg("FromClaim", GPU, {"n": 2}),
                cfg("FromClaim", GPU, {"n": 1}),
                cfg("FromClaim", GPU, {"n": 3}),
            ],
        ),
    ),
    _case(
        "config-per-claim",
        claims=[
            claim("claim-0", req("a", "gpu")),
            claim("claim-1", req("a", "gpu-plain"), config=[claim_config(GPU, {"c": 1})]),
        ],
        expected=ok_many(
            claim_0=expect(res("a", "gpu-0"), config=[cfg("FromClass", GPU, {"from": "gpu-class"})]),
            claim_1=expect(res("a", "gpu-1"), config=[cfg("FromClaim", GPU, {"c": 1})]),
        ),
    ),
    _case(
        "results-follow-request-order-not-device-order",
        claims=[claim("claim-0", req("z", "nic"), req("a", "gpu-plain", count=2))],
        expected=ok(res("z", "nic-0", driver=NIC), res("a", "gpu-0"), res("a", "gpu-1")),
    ),
    _case(
        "nested-parameters-kept-verbatim",
        claims=[
            claim(
                "claim-0",
                req("a", "gpu-plain"),
                config=[
                    claim_config(
                        GPU,
                        {
                            "apiVersion": "gpu.example.com/v1",
                            "kind": "GpuConfig",
                            "sharing": {"strategy": "TimeSlicing", "slices": [1, 2]},
                        },
                    )
                ],
            )
        ],
        expected=ok(
            res("a", "gpu-0"),
            config=[
                cfg(
                    "FromClaim",
                    GPU,
                    {
                        "apiVersion": "gpu.example.com/v1",
                        "kind": "GpuConfig",
                        "sharing": {"strategy": "TimeSlicing", "slices": [1, 2]},
                    },
                )
            ],
        ),
    ),
    case(
        "class-config-with-driver-other-than-devices",
        # Configs are passed through as written; the driver in them is not matched
        # against the devices.
        claims=[claim("claim-0", req("a", "mixed"))],
        classes=[device_class("mixed", driver=GPU, config=[opaque(NIC, {"x": 1})])],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("a", "gpu-0"), config=[cfg("FromClass", NIC, {"x": 1})]),
    ),
]
