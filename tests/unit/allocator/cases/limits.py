"""The 32-results limit and fatal input errors (CEL runtime errors, unknown classes)."""

from __future__ import annotations

from ..kit import (
    allocated,
    case,
    claim,
    dev,
    device_class,
    devs,
    error,
    first,
    ok,
    ok_many,
    req,
    res,
    slice_,
    sub,
    unfit,
)

MISSING = 'device.attributes["gpu.example.com"].model == "a100"'

#: Fails with "no such key" on a device without the attribute.
MISSING_A = 'device.attributes["gpu.example.com"].model == "a"'

CASES = [
    case(
        "thirty-two-devices-in-one-request",
        claims=[claim("claim-0", req("req-0", count=32))],
        slices=[slice_(devices=devs(40, prefix="gpu-"))],
        expected=ok(*[res("req-0", f"gpu-{i}") for i in range(32)]),
    ),
    case(
        "thirty-three-devices-in-one-request-is-an-error",
        claims=[claim("claim-0", req("req-0", count=33))],
        slices=[slice_(devices=devs(40, prefix="gpu-"))],
        expected=error("33", "32"),
    ),
    case(
        "thirty-three-over-two-requests-is-an-error",
        claims=[claim("claim-0", req("req-0", count=20), req("req-1", count=13))],
        slices=[slice_(devices=devs(40, prefix="gpu-"))],
        expected=error("32"),
    ),
    case(
        "thirty-three-even-without-devices-is-an-error",
        claims=[claim("claim-0", req("req-0", count=33))],
        slices=[],
        expected=error("32"),
    ),
    case(
        "limit-is-per-claim",
        claims=[claim("claim-0", req("req-0", count=20)), claim("claim-1", req("req-0", count=20))],
        slices=[slice_(devices=devs(40, prefix="gpu-"))],
        expected=ok_many(
            claim_0=[res("req-0", f"gpu-{i}") for i in range(20)],
            claim_1=[res("req-0", f"gpu-{i}") for i in range(20, 40)],
        ),
    ),
    case(
        "thirty-two-split-over-requests",
        claims=[claim("claim-0", req("req-0", count=16), req("req-1", count=16))],
        slices=[slice_(devices=devs(32, prefix="gpu-"))],
        expected=ok(
            *[res("req-0", f"gpu-{i}") for i in range(16)], *[res("req-1", f"gpu-{i}") for i in range(16, 32)]
        ),
    ),
    case(
        "prioritized-smallest-alternative-counts-towards-limit",
        claims=[
            claim("claim-0", req("req-0", count=31), first("req-1", sub("a", count=4), sub("b", count=2)))
        ],
        slices=[slice_(devices=devs(40, prefix="gpu-"))],
        expected=error("32"),
    ),
    case(
        "prioritized-falls-back-to-stay-within-limit",
        claims=[
            claim("claim-0", req("req-0", count=30), first("req-1", sub("a", count=4), sub("b", count=2)))
        ],
        slices=[slice_(devices=devs(40, prefix="gpu-"))],
        expected=ok(
            *[res("req-0", f"gpu-{i}") for i in range(30)], res("req-1/b", "gpu-30"), res("req-1/b", "gpu-31")
        ),
    ),
    # --------------------------------------------------------------- CEL errors
    case(
        "cel-missing-key-in-request-selector-is-an-error",
        claims=[claim("claim-0", req("req-0", selectors=[MISSING]))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error("claim-0"),
    ),
    case(
        "cel-missing-key-in-class-selector-is-an-error",
        claims=[claim("claim-0", req("req-0", "a100"))],
        classes=[device_class("a100", selectors=[MISSING])],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error("a100"),
    ),
    case(
        "cel-missing-key-on-second-device-in-all-mode-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True, selectors=[MISSING]))],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "a100"}), dev("gpu-1")])],
        expected=error("claim-0"),
    ),
    case(
        "cel-missing-key-is-not-false",
        # If a missing key counted as "false", gpu-1 would be chosen.
        claims=[claim("claim-0", req("req-0", selectors=[MISSING]))],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1", attrs={"model": "a100"})])],
        expected=error(),
    ),
    case(
        "cel-missing-capacity-key-is-an-error",
        claims=[
            claim(
                "claim-0",
                req(
                    "req-0",
                    selectors=['device.capacity["gpu.example.com"].memory.compareTo(quantity("1Gi")) >= 0'],
                ),
            )
        ],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error(),
    ),
    case(
        "cel-has-guard-avoids-the-error",
        claims=[
            claim(
                "claim-0",
                req(
                    "req-0",
                    selectors=[
                        'has(device.attributes["gpu.example.com"].model) && device.attributes["gpu.example.com"].model == "a100"'
                    ],
                ),
            )
        ],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1", attrs={"model": "a100"})])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "cel-in-guard-avoids-the-error",
        claims=[
            claim(
                "claim-0",
                req(
                    "req-0",
                    selectors=[
                        '"model" in device.attributes["gpu.example.com"] && device.attributes["gpu.example.com"].model == "a100"'
                    ],
                ),
            )
        ],
        slices=[slice_(devices=[dev("gpu-0"), dev("gpu-1", attrs={"model": "a100"})])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "cel-error-on-device-of-other-class-not-evaluated",
        # The class selector (driver) filters the NIC first; the request selector never
        # sees a device without the attribute.
        claims=[claim("claim-0", req("req-0", selectors=[MISSING]))],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"model": "a100"})]),
            slice_(driver="nic.example.com", devices=[dev("nic-0")]),
        ],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "cel-non-boolean-result-is-an-error",
        claims=[claim("claim-0", req("req-0", selectors=['device.attributes["gpu.example.com"].model']))],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "a100"})])],
        expected=error(),
    ),
    case(
        "cel-error-in-second-claim-fails-all",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0", selectors=[MISSING]))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=error("claim-1"),
    ),
    case(
        "cel-selector-false-for-all-devices-is-unfit-not-error",
        claims=[claim("claim-0", req("req-0", selectors=['device.driver == "none"']))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "unknown-class-in-subrequest-is-an-error",
        claims=[claim("claim-0", first("req-0", sub("a"), sub("b", "missing")))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=error("missing"),
    ),
    case(
        "cel-error-on-device-of-per-device-slice-for-other-node-is-an-error",
        # Upstream runs selectors on every device of a per-device slice that reaches the
        # node before it checks each device's node (issue 16).
        claims=[claim("claim-0", req("req-0", selectors=[MISSING_A]))],
        slices=[
            slice_(
                node=None,
                per_device=True,
                pool="pd",
                devices=[
                    dev("gpu-0", node_name="node-2"),
                    dev("gpu-1", node_name="node-1", attrs={"model": "a"}),
                ],
            )
        ],
        expected=error("gpu-0"),
    ),
    case(
        "cel-error-on-device-in-use-in-all-mode-is-an-error",
        # "All" runs its selectors on every device of the node, in use or not.
        claims=[claim("claim-0", req("req-0", all=True, selectors=[MISSING_A]))],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "a"}), dev("gpu-1")])],
        allocated=[allocated("old", res("r", "gpu-1"))],
        expected=error("gpu-1"),
    ),
    case(
        "cel-error-on-device-in-use-is-not-reached",
        claims=[claim("claim-0", req("req-0", selectors=[MISSING_A]))],
        slices=[slice_(devices=[dev("gpu-0", attrs={"model": "a"}), dev("gpu-1")])],
        allocated=[allocated("old", res("r", "gpu-1"))],
        expected=ok(res("req-0", "gpu-0")),
    ),
]
