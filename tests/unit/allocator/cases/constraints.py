"""matchAttribute and distinctAttribute constraints, scalar and list-typed attributes."""

from __future__ import annotations

from ..kit import (
    NIC,
    case,
    claim,
    dev,
    distinct,
    error,
    first,
    match,
    ok,
    ok_many,
    req,
    res,
    slice_,
    sub,
    unfit,
    ver,
)

NUMA = "gpu.example.com/numa"
MODEL = "gpu.example.com/model"
SHARED = "example.com/numa"  # a domain both drivers publish


def _pair(attr: str, a: object, b: object, *, count: int = 2) -> list:
    """One slice with two devices whose attribute `attr` (unqualified) is a, b."""
    return [slice_(devices=[dev("gpu-0", attrs={attr: a}), dev("gpu-1", attrs={attr: b})])]


CASES = [
    # -------------------------------------------------------------- matchAttribute
    case(
        "match-int-equal",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=_pair("numa", 1, 1),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-int-different-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=_pair("numa", 1, 2),
        expected=unfit(),
    ),
    case(
        "match-string-different-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(MODEL)])],
        slices=_pair("model", "a", "b"),
        expected=unfit(),
    ),
    case(
        "match-string-equal",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(MODEL)])],
        slices=_pair("model", "a", "a"),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-bool-different-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/ok")])],
        slices=_pair("ok", True, False),
        expected=unfit(),
    ),
    case(
        "match-bool-equal",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/ok")])],
        slices=_pair("ok", False, False),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-version-different-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/v")])],
        slices=_pair("v", ver("1.0.0"), ver("2.0.0")),
        expected=unfit(),
    ),
    case(
        "match-version-equal",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/v")])],
        slices=_pair("v", ver("1.0.0"), ver("1.0.0")),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-different-types-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=_pair("numa", 1, "1"),
        expected=unfit(),
    ),
    case(
        "match-attribute-missing-on-device-does-not-fit",
        claims=[claim("claim-0", req("req-0"), constraints=[match("gpu.example.com/nonexistent")])],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "match-skips-device-without-attribute",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=[
            slice_(devices=[dev("gpu-0"), dev("gpu-1", attrs={"numa": 0}), dev("gpu-2", attrs={"numa": 0})])
        ],
        expected=ok(res("req-0", "gpu-1"), res("req-0", "gpu-2")),
    ),
    case(
        "match-backtracks-to-find-a-matching-pair",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 1}),
                    dev("gpu-2", attrs={"numa": 2}),
                    dev("gpu-3", attrs={"numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-1"), res("req-0", "gpu-3")),
    ),
    case(
        "match-across-two-requests",
        claims=[claim("claim-0", req("req-0"), req("req-1"), constraints=[match(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 1}),
                    dev("gpu-2", attrs={"numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-1"), res("req-1", "gpu-2")),
    ),
    case(
        "match-across-drivers-qualified-domain",
        claims=[claim("claim-0", req("gpu"), req("nic", "nic"), constraints=[match(SHARED)])],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={SHARED: 0}), dev("gpu-1", attrs={SHARED: 1})]),
            slice_(driver=NIC, devices=[dev("nic-0", attrs={SHARED: 1})]),
        ],
        expected=ok(res("gpu", "gpu-1"), res("nic", "nic-0", driver=NIC)),
    ),
    case(
        "match-driver-domain-does-not-reach-other-driver",
        # gpu.example.com/numa is the unqualified "numa" of GPU devices only; the NIC's
        # own unqualified "numa" is nic.example.com/numa.
        claims=[claim("claim-0", req("gpu"), req("nic", "nic"), constraints=[match(NUMA)])],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"numa": 0})]),
            slice_(driver=NIC, devices=[dev("nic-0", attrs={"numa": 0})]),
        ],
        expected=unfit(),
    ),
    case(
        "match-fully-qualified-key-on-device-of-that-driver",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=[slice_(devices=[dev("gpu-0", attrs={NUMA: 3}), dev("gpu-1", attrs={"numa": 3})])],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-limited-to-listed-requests",
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1"),
                req("req-2"),
                constraints=[match(NUMA, "req-0", "req-1")],
            )
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
        expected=ok(res("req-0", "gpu-0"), res("req-1", "gpu-2"), res("req-2", "gpu-1")),
    ),
    case(
        "match-unlisted-request-may-lack-the-attribute",
        claims=[claim("claim-0", req("req-0"), req("other", "nic"), constraints=[match(NUMA, "req-0")])],
        slices=[
            slice_(devices=[dev("gpu-0", attrs={"numa": 0})]),
            slice_(driver=NIC, devices=[dev("nic-0")]),
        ],
        expected=ok(res("req-0", "gpu-0"), res("other", "nic-0", driver=NIC)),
    ),
    case(
        "two-match-constraints-with-retry",
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1"),
                constraints=[match("gpu.example.com/v", "req-0"), match(MODEL)],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"v": ver("1.0.0"), "model": "a"}),
                    dev("gpu-1", attrs={"v": ver("2.0.0"), "model": "b"}),
                    dev("gpu-2", attrs={"v": ver("3.0.0"), "model": "b"}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-1"), res("req-1", "gpu-2")),
    ),
    case(
        "match-several-constraints-all-hold",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA), match(MODEL)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0, "model": "a"}),
                    dev("gpu-1", attrs={"numa": 0, "model": "b"}),
                    dev("gpu-2", attrs={"numa": 1, "model": "a"}),
                    dev("gpu-3", attrs={"numa": 0, "model": "a"}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-3")),
    ),
    case(
        "match-in-all-mode-violation-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True), constraints=[match(NUMA)])],
        slices=_pair("numa", 1, 2),
        expected=error("constraint"),
    ),
    case(
        "match-in-all-mode-satisfied",
        claims=[claim("claim-0", req("req-0", all=True), constraints=[match(NUMA)])],
        slices=_pair("numa", 1, 1),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-is-per-claim",
        claims=[
            claim("claim-0", req("req-0"), constraints=[match(NUMA)]),
            claim("claim-1", req("req-0"), constraints=[match(NUMA)]),
        ],
        slices=_pair("numa", 1, 2),
        expected=ok_many(claim_0=[res("req-0", "gpu-0")], claim_1=[res("req-0", "gpu-1")]),
    ),
    # ------------------------------------------------------- matchAttribute, lists
    case(
        "match-list-common-element",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/links")])],
        slices=_pair("links", ["a", "b"], ["b", "c"]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-list-no-common-element",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/links")])],
        slices=_pair("links", ["a", "b"], ["c", "d"]),
        expected=unfit(),
    ),
    case(
        "match-list-running-intersection-must-stay-non-empty",
        claims=[claim("claim-0", req("req-0", count=3), constraints=[match("gpu.example.com/links")])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"links": ["a", "b"]}),
                    dev("gpu-1", attrs={"links": ["b", "c"]}),
                    dev("gpu-2", attrs={"links": ["a", "c"]}),
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "match-list-intersection-of-three",
        claims=[claim("claim-0", req("req-0", count=3), constraints=[match("gpu.example.com/links")])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"links": ["a", "b"]}),
                    dev("gpu-1", attrs={"links": ["b", "c"]}),
                    dev("gpu-2", attrs={"links": ["b"]}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1"), res("req-0", "gpu-2")),
    ),
    case(
        "match-scalar-and-list-with-common-element",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/links")])],
        slices=_pair("links", "b", ["a", "b"]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-scalar-and-list-without-common-element",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/links")])],
        slices=_pair("links", "z", ["a", "b"]),
        expected=unfit(),
    ),
    case(
        "match-int-lists",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(NUMA)])],
        slices=_pair("numa", [0, 1], [1, 2]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-bool-lists",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/flags")])],
        slices=_pair("flags", [True], [False, True]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-version-lists",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/v")])],
        slices=_pair("v", [ver("1.0.0"), ver("2.0.0")], [ver("2.0.0")]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "match-int-list-and-string-list-do-not-match",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match("gpu.example.com/x")])],
        slices=_pair("x", [1, 2], ["1", "2"]),
        expected=unfit(),
    ),
    case(
        "match-list-backtracking-restores-the-intersection",
        # gpu-0 + gpu-1 narrows to {b}; gpu-2 has no b. Dropping gpu-1 must give back the
        # wider set {a, b} so that gpu-0 + gpu-2 (common: a) is found.
        claims=[
            claim(
                "claim-0",
                req("req-0", count=2),
                req("req-1", selectors=['device.attributes["gpu.example.com"].last']),
                constraints=[match("gpu.example.com/links")],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"links": ["a", "b"], "last": False}),
                    dev("gpu-1", attrs={"links": ["b"], "last": False}),
                    dev("gpu-2", attrs={"links": ["a"], "last": False}),
                    dev("gpu-3", attrs={"links": ["a"], "last": True}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-2"), res("req-1", "gpu-3")),
    ),
    # ----------------------------------------------------------- distinctAttribute
    case(
        "distinct-int-different",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct(NUMA)])],
        slices=_pair("numa", 0, 1),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "distinct-int-same-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct(NUMA)])],
        slices=_pair("numa", 0, 0),
        expected=unfit(),
    ),
    case(
        "distinct-string-same-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct(MODEL)])],
        slices=_pair("model", "a", "a"),
        expected=unfit(),
    ),
    case(
        "distinct-bool",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/ok")])],
        slices=_pair("ok", True, False),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "distinct-version-same-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/v")])],
        slices=_pair("v", ver("1.0.0"), ver("1.0.0")),
        expected=unfit(),
    ),
    case(
        "distinct-skips-duplicates",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 0}),
                    dev("gpu-2", attrs={"numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-2")),
    ),
    case(
        "distinct-three-against-every-earlier-device",
        # The third device must differ from the first as well, not only from the second.
        claims=[claim("claim-0", req("req-0", count=3), constraints=[distinct(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 1}),
                    dev("gpu-2", attrs={"numa": 0}),
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "distinct-across-requests",
        claims=[claim("claim-0", req("req-0"), req("req-1"), constraints=[distinct(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 0}),
                    dev("gpu-2", attrs={"numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-1", "gpu-2")),
    ),
    case(
        "distinct-attribute-missing-does-not-fit",
        claims=[claim("claim-0", req("req-0"), constraints=[distinct(NUMA)])],
        slices=[slice_(devices=[dev("gpu-0")])],
        expected=unfit(),
    ),
    case(
        "distinct-with-subrequests",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", count=2), sub("b")),
                req("req-1"),
                constraints=[distinct(NUMA)],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 0}),
                    dev("gpu-2", attrs={"numa": 0}),
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "distinct-with-subrequests-fits-with-second",
        claims=[
            claim(
                "claim-0",
                first("req-0", sub("a", count=2), sub("b")),
                req("req-1"),
                constraints=[distinct(NUMA)],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 1}),
                    dev("gpu-2", attrs={"numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0/b", "gpu-0"), res("req-1", "gpu-1")),
    ),
    case(
        "distinct-list-disjoint",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/links")])],
        slices=_pair("links", ["a", "b"], ["c", "d"]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "distinct-list-overlapping-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/links")])],
        slices=_pair("links", ["a", "b"], ["b", "c"]),
        expected=unfit(),
    ),
    case(
        "distinct-scalar-and-list-disjoint",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/links")])],
        slices=_pair("links", "z", ["a", "b"]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "distinct-scalar-in-list-does-not-fit",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/links")])],
        slices=_pair("links", "a", ["a", "b"]),
        expected=unfit(),
    ),
    case(
        "distinct-int-lists-disjoint",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct(NUMA)])],
        slices=_pair("numa", [0, 1], [2, 3]),
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-1")),
    ),
    case(
        "distinct-version-lists-overlap",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[distinct("gpu.example.com/v")])],
        slices=_pair("v", [ver("1.0.0")], [ver("1.0.0"), ver("2.0.0")]),
        expected=unfit(),
    ),
    case(
        "distinct-limited-to-listed-requests",
        claims=[
            claim(
                "claim-0",
                req("req-0"),
                req("req-1"),
                req("req-2"),
                constraints=[distinct(NUMA, "req-0", "req-1")],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"numa": 0}),
                    dev("gpu-1", attrs={"numa": 0}),
                    dev("gpu-2", attrs={"numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-1", "gpu-2"), res("req-2", "gpu-1")),
    ),
    case(
        "match-and-distinct-together",
        claims=[claim("claim-0", req("req-0", count=2), constraints=[match(MODEL), distinct(NUMA)])],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", attrs={"model": "a", "numa": 0}),
                    dev("gpu-1", attrs={"model": "a", "numa": 0}),
                    dev("gpu-2", attrs={"model": "b", "numa": 1}),
                    dev("gpu-3", attrs={"model": "a", "numa": 1}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0"), res("req-0", "gpu-3")),
    ),
    case(
        "distinct-in-all-mode-violation-is-an-error",
        claims=[claim("claim-0", req("req-0", all=True), constraints=[distinct(NUMA)])],
        slices=_pair("numa", 0, 0),
        expected=error("constraint"),
    ),
]
