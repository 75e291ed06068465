"""adminAccess: allowed on devices in use, and does not count as in use itself."""

from __future__ import annotations

from ..kit import (
    allocated,
    case,
    claim,
    dev,
    devs,
    ok,
    ok_many,
    req,
    res,
    slice_,
    taint,
    tol,
    unfit,
)

CASES = [
    case(
        "admin-simple",
        claims=[claim("claim-0", req("req-0", admin=True))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0", adminAccess=True)),
    ),
    case(
        "admin-false-is-ordinary",
        claims=[claim("claim-0", req("req-0", admin=False))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "admin-on-device-in-use",
        claims=[claim("claim-0", req("req-0", admin=True))],
        slices=[slice_(devices=[dev("gpu-0")])],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=ok(res("req-0", "gpu-0", adminAccess=True)),
    ),
    case(
        "admin-all-on-devices-partly-in-use",
        claims=[claim("claim-0", req("req-0", admin=True, all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=ok(res("req-0", "gpu-0", adminAccess=True), res("req-0", "gpu-1", adminAccess=True)),
    ),
    case(
        "admin-count-two-on-devices-partly-in-use",
        claims=[claim("claim-0", req("req-0", admin=True, count=2))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=ok(res("req-0", "gpu-0", adminAccess=True), res("req-0", "gpu-1", adminAccess=True)),
    ),
    case(
        "existing-admin-allocation-does-not-block",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        allocated=[allocated("admin", res("r", "gpu-0", adminAccess=True))],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "two-admin-claims-share-a-device",
        claims=[claim("claim-0", req("req-0", admin=True)), claim("claim-1", req("req-0", admin=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(
            claim_0=[res("req-0", "gpu-0", adminAccess=True)],
            claim_1=[res("req-0", "gpu-0", adminAccess=True)],
        ),
    ),
    case(
        "admin-claim-after-ordinary-claim-shares-the-device",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0", admin=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(
            claim_0=[res("req-0", "gpu-0")],
            claim_1=[res("req-0", "gpu-0", adminAccess=True)],
        ),
    ),
    case(
        "ordinary-claim-skips-device-picked-for-admin-in-same-attempt",
        # Only existing admin allocations are ignored; a device being picked in this
        # attempt counts as in use for non-admin requests.
        claims=[claim("claim-0", req("req-0", admin=True)), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(
            claim_0=[res("req-0", "gpu-0", adminAccess=True)],
            claim_1=[res("req-0", "gpu-1")],
        ),
    ),
    case(
        "admin-not-the-same-device-twice-in-one-claim",
        claims=[claim("claim-0", req("req-0", admin=True), req("req-1", admin=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok(res("req-0", "gpu-0", adminAccess=True), res("req-1", "gpu-1", adminAccess=True)),
    ),
    case(
        "admin-one-device-two-requests-in-one-claim-does-not-fit",
        claims=[claim("claim-0", req("req-0", admin=True), req("req-1", admin=True))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "admin-all-after-admin-request-in-same-claim-does-not-fit",
        claims=[claim("claim-0", req("req-0", admin=True), req("req-1", admin=True, all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "admin-and-ordinary-request-in-same-claim-need-different-devices",
        claims=[claim("claim-0", req("req-0"), req("req-1", admin=True))],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "admin-count-exceeds-devices",
        claims=[claim("claim-0", req("req-0", admin=True, count=3))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=unfit(),
    ),
    case(
        "admin-still-needs-selectors",
        claims=[
            claim(
                "claim-0", req("req-0", admin=True, selectors=['device.attributes["gpu.example.com"].i == 1'])
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", attrs={"i": 0}), dev("gpu-1", attrs={"i": 1})])],
        allocated=[allocated("old", res("r", "gpu-1"))],
        expected=ok(res("req-0", "gpu-1", adminAccess=True)),
    ),
    case(
        "admin-still-blocked-by-untolerated-taint",
        claims=[claim("claim-0", req("req-0", admin=True))],
        slices=[slice_(devices=[dev("gpu-0", taints=[taint("broken", "NoSchedule")])])],
        expected=unfit(),
    ),
    case(
        "admin-with-toleration-on-tainted-device",
        claims=[claim("claim-0", req("req-0", admin=True, tolerations=[tol("broken", op="Exists")]))],
        slices=[slice_(devices=[dev("gpu-0", taints=[taint("broken", "NoExecute")])])],
        expected=ok(res("req-0", "gpu-0", adminAccess=True, tolerations=[tol("broken", op="Exists")])),
    ),
    case(
        "admin-all-with-in-use-device-of-another-claim-in-this-attempt",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0", admin=True, all=True))],
        slices=[slice_(devices=devs(2, prefix="gpu-"))],
        expected=ok_many(
            claim_0=[res("req-0", "gpu-0")],
            claim_1=[res("req-0", "gpu-0", adminAccess=True), res("req-0", "gpu-1", adminAccess=True)],
        ),
    ),
]
