"""Binding conditions: copied into results; pools with such devices are tried last."""

from __future__ import annotations

from ..kit import (
    NIC,
    case,
    claim,
    counter_set,
    dev,
    ok,
    ok_many,
    req,
    res,
    slice_,
    taint,
    tol,
    unfit,
)

READY = ["attached"]
FAILED = ["attach-failed"]


def _bdev(name: str, **kwargs: object) -> dict:
    return dev(name, binding=READY, binding_failure=FAILED, **kwargs)  # type: ignore[arg-type]


def bres(request: str, device: str, **kwargs: object) -> dict:
    return res(request, device, bindingConditions=READY, bindingFailureConditions=FAILED, **kwargs)  # type: ignore[arg-type]


CASES = [
    case(
        "binding-conditions-copied",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[_bdev("gpu-0")])],
        expected=ok(bres("req-0", "gpu-0")),
    ),
    case(
        "binding-conditions-several-devices",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[slice_(devices=[_bdev("gpu-0"), _bdev("gpu-1")])],
        expected=ok(bres("req-0", "gpu-0"), bres("req-0", "gpu-1")),
    ),
    case(
        "binding-conditions-only-on-devices-that-have-them",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[slice_(devices=[_bdev("gpu-0"), dev("gpu-1")])],
        expected=ok(bres("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "binding-pool-sorted-after-plain-pool",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[_bdev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-b")),
    ),
    case(
        "binding-pool-whole-pool-goes-last",
        # pool-a has one plain device but also one with binding conditions: the whole
        # pool is tried after pool-b.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[dev("plain"), _bdev("bound")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-b")),
    ),
    case(
        "binding-pool-used-when-plain-pool-exhausted",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[_bdev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-b"), bres("req-0", "gpu-0", pool="pool-a")),
    ),
    case(
        "binding-pools-keep-name-order-among-themselves",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_("s-c", pool="pool-c", devices=[_bdev("gpu-0")]),
            slice_("s-a", pool="pool-a", devices=[_bdev("gpu-0")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-b"), bres("req-0", "gpu-0", pool="pool-a")),
    ),
    case(
        "binding-pool-of-other-driver-does-not-reorder",
        claims=[claim("claim-0", req("req-0"), req("req-1", "nic"))],
        slices=[
            slice_("s-a", pool="pool-a", devices=[dev("gpu-0")]),
            slice_("s-n", driver=NIC, pool="pool-a", devices=[_bdev("nic-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-a"), bres("req-1", "nic-0", driver=NIC, pool="pool-a")),
    ),
    case(
        "binding-device-with-counters",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("a-counters", count=2, shared_counters=[counter_set("mem", {"memory": "8Gi"})]),
            slice_("b-devices", count=2, devices=[_bdev("p-0", consumes={"mem": {"memory": "4Gi"}})]),
        ],
        expected=ok(bres("req-0", "p-0")),
    ),
    case(
        "binding-device-with-untolerated-taint",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[_bdev("gpu-0", taints=[taint("t", "NoSchedule")])])],
        expected=unfit(),
    ),
    case(
        "binding-device-with-tolerated-taint",
        claims=[claim("claim-0", req("req-0", tolerations=[tol("t", op="Exists")]))],
        slices=[slice_(devices=[_bdev("gpu-0", taints=[taint("t", "NoSchedule")])])],
        expected=ok(bres("req-0", "gpu-0", tolerations=[tol("t", op="Exists")])),
    ),
    case(
        "binding-devices-in-two-claims",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=[_bdev("gpu-0"), dev("gpu-1")])],
        expected=ok_many(claim_0=[bres("req-0", "gpu-0")], claim_1=[res("req-0", "gpu-1")]),
    ),
    case(
        "binding-pool-order-looks-only-at-slices-for-the-node",
        # Upstream orders a pool last when a device of its slices for this node has
        # binding conditions; pool-a's only such device is on node-2 (issue 16).
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_("s-a-1", pool="pool-a", count=2, devices=[dev("gpu-0")]),
            slice_("s-a-2", pool="pool-a", node="node-2", count=2, devices=[_bdev("gpu-1")]),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-a")),
    ),
    case(
        "binding-pool-order-counts-per-device-slices-devices-of-other-nodes",
        # A per-device slice that reaches the node counts with all its devices.
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                "s-a",
                pool="pool-a",
                node=None,
                per_device=True,
                devices=[dev("gpu-0", node_name="node-1"), _bdev("gpu-1", node_name="node-2")],
            ),
            slice_("s-b", pool="pool-b", devices=[dev("gpu-0")]),
        ],
        expected=ok(res("req-0", "gpu-0", pool="pool-b")),
    ),
]
