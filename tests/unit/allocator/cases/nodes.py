"""Node selection (nodeName, nodeSelector, allNodes, perDeviceNodeSelection) and the
nodeSelector of the allocation result."""

from __future__ import annotations

from ..kit import (
    NIC,
    case,
    claim,
    dev,
    devs,
    expect,
    node_sel,
    ok,
    ok_many,
    req,
    res,
    slice_,
    term,
    unfit,
)

ZONE_A = node_sel(term(labels={"zone": ["a"]}))
ZONE_B = node_sel(term(labels={"zone": ["b"]}))
RACK_1 = node_sel(term(labels={"rack": ["r1"]}))
ZONE_A_RACK_1 = node_sel(term(labels={"zone": ["a"], "rack": ["r1"]}))


def _net(pool: str = "net", **kwargs: object) -> dict:
    return slice_(node=None, all_nodes=True, pool=pool, **kwargs)  # type: ignore[arg-type]


CASES = [
    case(
        "all-nodes-slice-usable-and-no-node-selector",
        claims=[claim("claim-0", req("req-0"))],
        slices=[_net(devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0", pool="net"), node_selector=None),
    ),
    case(
        "all-nodes-slice-usable-from-any-node",
        claims=[claim("claim-0", req("req-0"))],
        slices=[_net(devices=[dev("gpu-0")])],
        node="node-7",
        labels={},
        expected=ok(res("req-0", "gpu-0", pool="net"), node_selector=None),
    ),
    case(
        "many-network-attached-devices",
        claims=[claim("claim-0", req("req-0", count=3))],
        slices=[_net(devices=devs(3, prefix="gpu-"))],
        expected=ok(*[res("req-0", f"gpu-{i}", pool="net") for i in range(3)], node_selector=None),
    ),
    case(
        "node-selector-slice-matching-labels",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(node=None, node_selector=ZONE_A, pool="zone-a", devices=[dev("gpu-0")])],
        expected=ok(res("req-0", "gpu-0", pool="zone-a"), node_selector=ZONE_A),
    ),
    case(
        "node-selector-slice-not-matching",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(node=None, node_selector=ZONE_B, pool="zone-b", devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "node-selector-slice-on-node-name-field",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                node=None,
                node_selector=node_sel(term(fields={"metadata.name": ["node-1", "node-2"]})),
                pool="pair",
                devices=[dev("gpu-0")],
            )
        ],
        expected=ok(
            res("req-0", "gpu-0", pool="pair"),
            node_selector=node_sel(term(fields={"metadata.name": ["node-1", "node-2"]})),
        ),
    ),
    case(
        "node-selector-slice-node-name-field-other-node",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                node=None,
                node_selector=node_sel(term(fields={"metadata.name": ["node-2"]})),
                pool="n2",
                devices=[dev("gpu-0")],
            )
        ],
        expected=unfit(),
    ),
    case(
        "node-selector-not-in",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                node=None,
                node_selector=node_sel(term(labels={"zone": ["b"]}, op="NotIn")),
                pool="nb",
                devices=[dev("gpu-0")],
            )
        ],
        expected=ok(
            res("req-0", "gpu-0", pool="nb"), node_selector=node_sel(term(labels={"zone": ["b"]}, op="NotIn"))
        ),
    ),
    case(
        "node-selector-missing-label",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(node=None, node_selector=ZONE_A, pool="za", devices=[dev("gpu-0")])],
        labels={"rack": "r1"},
        expected=unfit(),
    ),
    case(
        "local-and-network-attached-device-pins-node",
        claims=[claim("claim-0", req("local"), req("net"))],
        # Pools are tried in name order: "node-1" before "zz-net".
        slices=[slice_(devices=[dev("gpu-0")]), _net("zz-net", devices=[dev("gpu-n")])],
        expected=ok(res("local", "gpu-0"), res("net", "gpu-n", pool="zz-net")),
    ),
    case(
        "node-selector-and-all-nodes-merge-to-the-selector",
        claims=[claim("claim-0", req("sel"), req("net"))],
        slices=[
            slice_(node=None, node_selector=ZONE_A, pool="a-zone", devices=[dev("gpu-0")]),
            _net(devices=[dev("gpu-n")]),
        ],
        expected=ok(
            res("sel", "gpu-0", pool="a-zone"), res("net", "gpu-n", pool="net"), node_selector=ZONE_A
        ),
    ),
    case(
        "two-node-selectors-merge-into-one-term",
        claims=[claim("claim-0", req("a"), req("b"))],
        slices=[
            slice_(node=None, node_selector=ZONE_A, pool="p-a", devices=[dev("gpu-0")]),
            slice_(node=None, node_selector=RACK_1, pool="p-b", devices=[dev("gpu-1")]),
        ],
        expected=ok(
            res("a", "gpu-0", pool="p-a"), res("b", "gpu-1", pool="p-b"), node_selector=ZONE_A_RACK_1
        ),
    ),
    case(
        "same-node-selector-twice-is-not-duplicated",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_(node=None, node_selector=ZONE_A, pool="p-a", devices=[dev("gpu-0")]),
            slice_(node=None, node_selector=ZONE_A, pool="p-b", devices=[dev("gpu-1")]),
        ],
        expected=ok(
            res("req-0", "gpu-0", pool="p-a"), res("req-0", "gpu-1", pool="p-b"), node_selector=ZONE_A
        ),
    ),
    case(
        "node-selector-and-node-name-pins-node",
        claims=[claim("claim-0", req("a"), req("b"))],
        slices=[
            slice_(node=None, node_selector=ZONE_A, pool="p-a", devices=[dev("gpu-0")]),
            slice_(pool="p-l", devices=[dev("gpu-1")]),
        ],
        expected=ok(res("a", "gpu-0", pool="p-a"), res("b", "gpu-1", pool="p-l")),
    ),
    case(
        "binds-to-node-pins-network-device",
        claims=[claim("claim-0", req("req-0"))],
        slices=[_net(devices=[dev("gpu-0", binds_to_node=True, binding=["ready"])])],
        expected=ok(
            res(
                "req-0", "gpu-0", pool="net", bindingConditions=["ready"], bindingFailureConditions=["failed"]
            )
        ),
    ),
    case(
        "binds-to-node-false-keeps-no-selector",
        claims=[claim("claim-0", req("req-0"))],
        slices=[_net(devices=[dev("gpu-0", binds_to_node=False)])],
        expected=ok(res("req-0", "gpu-0", pool="net"), node_selector=None),
    ),
    case(
        "node-selector-per-claim",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")]), _net("zz-net", devices=[dev("gpu-n")])],
        expected=ok_many(
            claim_0=[res("req-0", "gpu-0")],
            claim_1=expect(res("req-0", "gpu-n", pool="zz-net"), node_selector=None),
        ),
    ),
    # ------------------------------------------------------------ per-device nodes
    case(
        "per-device-node-name",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                node=None,
                per_device=True,
                pool="pd",
                devices=[
                    dev("gpu-2", node_name="node-2"),
                    dev("gpu-1", node_name="node-1"),
                ],
            )
        ],
        expected=ok(res("req-0", "gpu-1", pool="pd")),
    ),
    case(
        "per-device-node-name-other-node-only",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(node=None, per_device=True, pool="pd", devices=[dev("gpu-2", node_name="node-2")])],
        expected=unfit(),
    ),
    case(
        "per-device-node-selector",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                node=None,
                per_device=True,
                pool="pd",
                devices=[
                    dev("gpu-b", node_selector=ZONE_B),
                    dev("gpu-a", node_selector=ZONE_A),
                ],
            )
        ],
        expected=ok(res("req-0", "gpu-a", pool="pd"), node_selector=ZONE_A),
    ),
    case(
        "per-device-all-nodes",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(node=None, per_device=True, pool="pd", devices=[dev("gpu-0", all_nodes=True)])],
        expected=ok(res("req-0", "gpu-0", pool="pd"), node_selector=None),
    ),
    case(
        "per-device-mixed-selectors-merge",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_(
                node=None,
                per_device=True,
                pool="pd",
                devices=[
                    dev("gpu-0", node_selector=ZONE_A),
                    dev("gpu-1", node_selector=RACK_1),
                    dev("gpu-2", all_nodes=True),
                ],
            )
        ],
        expected=ok(
            res("req-0", "gpu-0", pool="pd"), res("req-0", "gpu-1", pool="pd"), node_selector=ZONE_A_RACK_1
        ),
    ),
    case(
        "per-device-node-name-and-all-nodes-pins-node",
        claims=[claim("claim-0", req("req-0", count=2))],
        slices=[
            slice_(
                node=None,
                per_device=True,
                pool="pd",
                devices=[
                    dev("gpu-0", all_nodes=True),
                    dev("gpu-1", node_name="node-1"),
                ],
            )
        ],
        expected=ok(res("req-0", "gpu-0", pool="pd"), res("req-0", "gpu-1", pool="pd")),
    ),
    case(
        "per-device-all-mode-only-matching-node",
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[
            slice_(
                node=None,
                per_device=True,
                pool="pd",
                devices=[
                    dev("gpu-0", node_name="node-1"),
                    dev("gpu-1", node_name="node-2"),
                    dev("gpu-2", node_selector=ZONE_A),
                ],
            )
        ],
        expected=ok(res("req-0", "gpu-0", pool="pd"), res("req-0", "gpu-2", pool="pd")),
    ),
    case(
        "per-device-other-driver-on-node",
        claims=[claim("claim-0", req("req-0", "nic"))],
        slices=[
            slice_(
                node=None,
                driver=NIC,
                per_device=True,
                pool="pd",
                devices=[
                    dev("nic-0", node_selector=ZONE_B),
                    dev("nic-1", node_selector=ZONE_A),
                ],
            )
        ],
        expected=ok(res("req-0", "nic-1", driver=NIC, pool="pd"), node_selector=ZONE_A),
    ),
    case(
        "node-name-slice-for-node-with-no-labels",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0")])],
        labels={},
        expected=ok(res("req-0", "gpu-0")),
    ),
]
