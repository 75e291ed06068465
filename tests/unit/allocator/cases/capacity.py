"""Consumable capacity: allowMultipleAllocations, capacity.requests, request policies,
shareID and consumedCapacity, capacity already used by existing claims."""

from __future__ import annotations

from typing import Any

from ..kit import (
    ANY,
    allocated,
    cap,
    case,
    claim,
    counter_set,
    dev,
    device_class,
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
)


def share(request: str, device: str, consumed: dict[str, str] | None, **kwargs: object) -> dict:
    """An expected result on a multi-allocatable device: some shareID, consumedCapacity."""
    return res(request, device, shareID=ANY, consumedCapacity=consumed, **kwargs)  # type: ignore[arg-type]


def old_share(device: str, consumed: dict[str, str], n: int = 0, **kwargs: object) -> dict:
    """A result of an existing claim on a multi-allocatable device."""
    return res(
        "r", device, shareID=f"00000000-0000-4000-8000-00000000000{n}", consumedCapacity=consumed, **kwargs
    )  # type: ignore[arg-type]


def _multi(name: str = "gpu-0", **capacity: object) -> dict:
    return dev(name, multi=True, capacity=capacity or None)  # type: ignore[arg-type]


_DRIVER_MEMORY = "gpu.example.com/memory"

#: (name, requested, published, expected on an exclusive device, consumed on a shared one:
#: None when it does not fit, "error" for upstream's "requested both as" error).
_SPELLINGS: list[tuple[str, dict[str, str], dict[str, str], dict[str, str] | str | None]] = [
    ("unqualified-and-unqualified-device", {"memory": "1"}, {"memory": "2"}, {"memory": "1"}),
    ("unqualified-and-qualified-device", {"memory": "1"}, {_DRIVER_MEMORY: "2"}, {_DRIVER_MEMORY: "1"}),
    ("qualified-and-unqualified-device", {_DRIVER_MEMORY: "1"}, {"memory": "2"}, {"memory": "1"}),
    (
        "unqualified-and-foreign-domain-only-device",
        {"memory": "1"},
        {"foo/memory": "2", "bar/memory": "2"},
        None,
    ),
    (
        "foreign-domain-and-foreign-domain-device",
        {"foo/memory": "1"},
        {"foo/memory": "2"},
        {"foo/memory": "1"},
    ),
    ("foreign-domain-and-driver-device", {"foo/memory": "1"}, {"memory": "2"}, None),
    # "A device can, in principle, publish the same capacity both without a domain and
    # explicitly qualified with its own driver as domain ... the entry with domain wins."
    (
        "unqualified-and-device-with-unqualified-and-qualified-capacity-names",
        {"memory": "2"},
        {"memory": "1", _DRIVER_MEMORY: "4"},
        {_DRIVER_MEMORY: "2"},
    ),
    (
        "unqualified-and-device-with-qualified-and-unqualified-capacity-names",
        {"memory": "2"},
        {"memory": "4", _DRIVER_MEMORY: "1"},
        None,
    ),
    # "this is ambiguous on the requester's side and is treated as a scheduling failure"
    (
        "with-unqualified-and-qualified-capacity-request-names",
        {"memory": "1", _DRIVER_MEMORY: "4"},
        {"memory": "2"},
        "error",
    ),
    (
        "with-qualified-and-unqualified-capacity-request-names",
        {"memory": "4", _DRIVER_MEMORY: "1"},
        {"memory": "2"},
        "error",
    ),
]


def _spelled(
    name: str, requested: dict[str, str], published: dict[str, str], want: object, *, shared: bool
) -> Any:
    outcome: Any
    if want == "error":
        outcome = error('capacity "memory" requested both as', "name it once in capacity.requests")
    elif want is None:
        outcome = unfit()
    else:
        outcome = ok(share("req-0", "gpu-0", dict(want)) if shared else res("req-0", "gpu-0"))  # type: ignore[call-overload]
    return case(
        f"consumable-capacity-request-{name}-{'shared' if shared else 'exclusive'}",
        claims=[claim("claim-0", req("req-0", all=True, capacity=requested))],
        slices=[slice_(devices=[dev("gpu-0", multi=shared or None, capacity=published)])],
        expected=outcome,
    )


_TWO_SPELLINGS = [
    *(_spelled(*row, shared=False) for row in _SPELLINGS),
    *(_spelled(*row, shared=True) for row in _SPELLINGS),
    # "A capacity's result name only gains the driver domain when the device published it
    # with that domain ... the unqualified one here must stay unqualified in the result."
    case(
        "consumable-capacity-request-unqualified-and-device-with-unrelated-qualified-capacity-shared",
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "1"}))],
        slices=[
            slice_(devices=[dev("gpu-0", multi=True, capacity={"memory": "2", "gpu.example.com/cores": "4"})])
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "1", "gpu.example.com/cores": "4"})),
    ),
]

CASES = [
    # ------------------------------------------------------------ no policy
    case(
        "multi-device-without-capacity-shared-by-two-claims",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=[_multi()])],
        expected=ok_many(claim_0=[share("req-0", "gpu-0", None)], claim_1=[share("req-0", "gpu-0", None)]),
    ),
    case(
        "multi-device-unrequested-capacity-takes-everything",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi")])],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-0", {"memory": "8Gi"})],
            claim_1=[share("req-0", "gpu-1", {"memory": "8Gi"})],
        ),
    ),
    case(
        "multi-device-unrequested-capacity-blocks-second-claim",
        claims=[claim("claim-0", req("req-0")), claim("claim-1", req("req-0"))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=unfit(),
    ),
    case(
        "multi-device-requested-capacity",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "2Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=ok(share("req-0", "gpu-0", {"memory": "2Gi"})),
    ),
    case(
        "multi-device-shared-by-two-claims-within-capacity",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "4Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "4Gi"})),
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-0", {"memory": "4Gi"})],
            claim_1=[share("req-0", "gpu-0", {"memory": "4Gi"})],
        ),
    ),
    case(
        "multi-device-second-claim-over-capacity-moves-on",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "6Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "4Gi"})),
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi")])],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-0", {"memory": "6Gi"})],
            claim_1=[share("req-0", "gpu-1", {"memory": "4Gi"})],
        ),
    ),
    case(
        "multi-device-request-above-capacity",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "16Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=unfit(),
    ),
    case(
        "request-for-capacity-the-device-lacks",
        claims=[claim("claim-0", req("req-0", capacity={"bandwidth": "1G"}))],
        slices=[
            slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi", bandwidth="10G")])
        ],
        expected=ok(share("req-0", "gpu-1", {"memory": "8Gi", "bandwidth": "1G"})),
    ),
    case(
        "consumed-capacity-lists-every-capacity",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "1Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={
                            "memory": "8Gi",
                            "cores": cap("8", default="1"),
                            "bandwidth": cap("100", default="0"),
                        },
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi", "cores": "1", "bandwidth": "0"})),
    ),
    case(
        "two-requests-of-one-claim-share-one-device",
        claims=[
            claim(
                "claim-0", req("req-0", capacity={"memory": "2Gi"}), req("req-1", capacity={"memory": "2Gi"})
            )
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="4Gi")])],
        expected=ok(share("req-0", "gpu-0", {"memory": "2Gi"}), share("req-1", "gpu-0", {"memory": "2Gi"})),
    ),
    case(
        "two-requests-of-one-claim-exceed-one-device",
        claims=[
            claim(
                "claim-0", req("req-0", capacity={"memory": "3Gi"}), req("req-1", capacity={"memory": "3Gi"})
            )
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="4Gi")])],
        expected=unfit(),
    ),
    case(
        "count-two-takes-two-different-devices",
        claims=[claim("claim-0", req("req-0", count=2, capacity={"memory": "1Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="4Gi"), _multi("gpu-1", memory="4Gi")])],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"}), share("req-0", "gpu-1", {"memory": "1Gi"})),
    ),
    case(
        "share-ids-differ-between-shares",
        # Checked separately in test_table_capacity: the two shareIDs must differ.
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "1Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "1Gi"})),
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="4Gi")])],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-0", {"memory": "1Gi"})],
            claim_1=[share("req-0", "gpu-0", {"memory": "1Gi"})],
        ),
    ),
    # ------------------------------------------------------- existing claims
    case(
        "capacity-used-by-existing-claim",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "4Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "4Gi"}))],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi"})),
    ),
    case(
        "capacity-used-by-existing-claim-leaves-too-little",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "5Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "4Gi"}))],
        expected=unfit(),
    ),
    case(
        "capacity-used-by-existing-claim-next-device",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "5Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "4Gi"}))],
        expected=ok(share("req-0", "gpu-1", {"memory": "5Gi"})),
    ),
    case(
        "capacity-aggregated-over-several-existing-claims",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "3Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[
            allocated("old-0", old_share("gpu-0", {"memory": "3Gi"}, 1)),
            allocated("old-1", old_share("gpu-0", {"memory": "3Gi"}, 2)),
        ],
        expected=unfit(),
    ),
    case(
        "capacity-aggregated-over-existing-and-this-attempt",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "2Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "2Gi"})),
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "5Gi"}))],
        expected=unfit(),
    ),
    case(
        "multi-device-dedicated-by-existing-claim-is-in-use",
        # An existing result without shareID took the whole device.
        claims=[claim("claim-0", req("req-0", capacity={"memory": "1Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=unfit(),
    ),
    case(
        "multi-device-dedicated-by-existing-claim-blocks-all",
        # Found by the property tests: "All" must not take a device that an existing
        # claim holds without a shareID.
        claims=[claim("claim-0", req("req-0", all=True))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[allocated("old", res("r", "gpu-0"))],
        expected=unfit(),
    ),
    case(
        "multi-device-all-mode-skips-device-without-room",
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "4Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="2Gi")])],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi"})),
    ),
    case(
        "multi-device-all-mode-fails-on-device-full-from-existing-claims",
        # Regression (issue 16): a matching shared device that could hold the request but
        # has too little capacity left counts as matching, so "all" cannot be had
        # (draco used to leave it out and allocate gpu-1 alone, which upstream rejects).
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "4Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "6Gi"}))],
        expected=unfit("gpu-0", "memory"),
    ),
    case(
        "multi-device-all-mode-full-device-falls-through-first-available",
        # Regression (issue 16): inside firstAvailable the next subrequest is tried.
        claims=[
            claim(
                "claim-0",
                first(
                    "req-0",
                    sub("all", all=True, capacity={"memory": "4Gi"}),
                    sub("one", capacity={"memory": "4Gi"}),
                ),
            )
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "6Gi"}))],
        expected=ok(share("req-0/one", "gpu-1", {"memory": "4Gi"})),
    ),
    case(
        "multi-device-all-mode-with-room-for-existing",
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "4Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), _multi("gpu-1", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "4Gi"}))],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi"}), share("req-0", "gpu-1", {"memory": "4Gi"})),
    ),
    case(
        "multi-device-all-mode-missing-capacity-does-not-fit",
        claims=[claim("claim-0", req("req-0", all=True, capacity={"bandwidth": "1"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=unfit(),
    ),
    case(
        "multi-device-all-mode-leaves-out-device-without-that-capacity",
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "2Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="2Gi"), dev("gpu-1", multi=True)])],
        expected=ok(share("req-0", "gpu-0", {"memory": "2Gi"})),
    ),
    case(
        "multi-device-all-mode-shares-with-earlier-request-of-same-claim",
        claims=[
            claim(
                "claim-0",
                req("one", capacity={"memory": "1Gi"}),
                req("all", all=True, capacity={"memory": "1Gi"}),
            )
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="2Gi"), _multi("gpu-1", memory="1Gi")])],
        expected=ok(
            share("one", "gpu-0", {"memory": "1Gi"}),
            share("all", "gpu-0", {"memory": "1Gi"}),
            share("all", "gpu-1", {"memory": "1Gi"}),
        ),
    ),
    case(
        "multi-device-all-mode-crowded-out-by-earlier-request-of-same-claim",
        # The earlier request fills gpu-0 (or gpu-1); "All" then cannot have both.
        claims=[
            claim(
                "claim-0",
                req("one", capacity={"memory": "1Gi"}),
                req("all", all=True, capacity={"memory": "1Gi"}),
            )
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="1Gi"), _multi("gpu-1", memory="1Gi")])],
        expected=unfit(),
    ),
    case(
        "multi-device-all-mode-with-existing-share-still-room",
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "1Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="2Gi"), _multi("gpu-1", memory="1Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "1Gi"}))],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"}), share("req-0", "gpu-1", {"memory": "1Gi"})),
    ),
    case(
        "all-mode-capacity-request-leaves-out-dedicated-devices-too-small",
        # Found while modelling the property tests: the capacity check also filters
        # dedicated devices out of the "All" set (missing capacity, or too little).
        claims=[claim("claim-0", req("req-0", all=True, capacity={"memory": "4Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", capacity={"memory": "8Gi"}),
                    dev("gpu-1"),
                    dev("gpu-2", capacity={"memory": "2Gi"}),
                ]
            )
        ],
        expected=ok(res("req-0", "gpu-0")),
    ),
    # ------------------------------------------------------- request policies
    case(
        "policy-default-used-when-not-requested",
        claims=[claim("claim-0", req("req-0"))],
        slices=[slice_(devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="1Gi")})])],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"})),
    ),
    case(
        "policy-zero-default-lets-many-share",
        claims=[claim(f"claim-{i}", req("req-0")) for i in range(3)],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", multi=True, capacity={"slots": cap("2", default="0", values=["0", "1"])})
                ]
            )
        ],
        expected=ok_many(**{f"claim_{i}": [share("req-0", "gpu-0", {"slots": "0"})] for i in range(3)}),
    ),
    case(
        "policy-range-default-when-not-requested",
        claims=[claim("claim-0", req("req-0"))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", min="2Gi", step="2Gi")},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "2Gi"})),
    ),
    case(
        "count-two-on-one-multi-device-does-not-fit",
        # Within one request the next device starts after the previous one: one
        # request never takes two shares of the same device.
        claims=[claim("claim-0", req("req-0", count=2, capacity={"memory": "1Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=unfit(),
    ),
    case(
        "policy-range-below-min-rounds-up",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "100Mi"}))],
        slices=[
            slice_(
                devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="1Gi", min="1Gi")})]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"})),
    ),
    case(
        "policy-range-without-step-keeps-value",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "1536Mi"}))],
        slices=[
            slice_(
                devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="1Gi", min="1Gi")})]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "1536Mi"})),
    ),
    case(
        "policy-range-step-rounds-up",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "3Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", min="2Gi", step="2Gi")},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi"})),
    ),
    case(
        "policy-range-step-exact-value-kept",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "6Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", min="2Gi", step="2Gi")},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "6Gi"})),
    ),
    case(
        "policy-range-step-offset-from-min",
        claims=[claim("claim-0", req("req-0", capacity={"cores": "4"}))],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", multi=True, capacity={"cores": cap("16", default="1", min="1", step="3")})
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"cores": "4"})),
    ),
    case(
        "policy-range-step-offset-rounds-to-grid",
        claims=[claim("claim-0", req("req-0", capacity={"cores": "5"}))],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", multi=True, capacity={"cores": cap("16", default="1", min="1", step="3")})
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"cores": "7"})),
    ),
    case(
        "policy-range-above-max-does-not-fit",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "6Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="1Gi", min="1Gi", max="4Gi")},
                    )
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "policy-range-at-max-fits",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "4Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="1Gi", min="1Gi", max="4Gi")},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi"})),
    ),
    case(
        "policy-range-rounded-above-max-does-not-fit",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "5Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", min="2Gi", max="4Gi", step="2Gi")},
                    )
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "policy-range-rounding-fills-device",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "3Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "3Gi"})),
        ],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", min="2Gi", step="2Gi")},
                    )
                ]
            )
        ],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-0", {"memory": "4Gi"})],
            claim_1=[share("req-0", "gpu-0", {"memory": "4Gi"})],
        ),
    ),
    case(
        "policy-range-rounding-overflows-device",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "3Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "5Gi"})),
        ],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", min="2Gi", step="2Gi")},
                    )
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "policy-valid-values-exact",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "2Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="1Gi", values=["1Gi", "2Gi", "4Gi"])},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "2Gi"})),
    ),
    case(
        "policy-valid-values-round-up",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "3Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="1Gi", values=["1Gi", "2Gi", "4Gi"])},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi"})),
    ),
    case(
        "policy-valid-values-round-up-to-smallest",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "1"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="2Gi", values=["1Gi", "2Gi", "4Gi"])},
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"})),
    ),
    case(
        "policy-valid-values-above-all-does-not-fit",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "5Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="1Gi", values=["1Gi", "2Gi", "4Gi"])},
                    )
                ]
            )
        ],
        expected=unfit(),
    ),
    case(
        "policy-valid-values-above-all-other-device-fits",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "5Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={"memory": cap("8Gi", default="1Gi", values=["1Gi", "2Gi", "4Gi"])},
                    ),
                    _multi("gpu-1", memory="8Gi"),
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-1", {"memory": "5Gi"})),
    ),
    case(
        "policy-on-one-capacity-default-on-other",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "3Gi"}))],
        slices=[
            slice_(
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        capacity={
                            "memory": cap("8Gi", default="1Gi", values=["1Gi", "4Gi"]),
                            "cores": cap("8", default="2", min="1"),
                        },
                    )
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "4Gi", "cores": "2"})),
    ),
    case(
        "policy-defaults-add-up-to-the-limit",
        claims=[claim(f"claim-{i}", req("req-0")) for i in range(4)],
        slices=[
            slice_(
                devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="2Gi", min="2Gi")})]
            )
        ],
        expected=ok_many(**{f"claim_{i}": [share("req-0", "gpu-0", {"memory": "2Gi"})] for i in range(4)}),
    ),
    case(
        "policy-defaults-over-the-limit",
        claims=[claim(f"claim-{i}", req("req-0")) for i in range(5)],
        slices=[
            slice_(
                devices=[dev("gpu-0", multi=True, capacity={"memory": cap("8Gi", default="2Gi", min="2Gi")})]
            )
        ],
        expected=unfit(),
    ),
    # ------------------------------------------------------- dedicated devices
    case(
        "dedicated-device-capacity-request-within-capacity",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "4Gi"}))],
        slices=[slice_(devices=[dev("gpu-0", capacity={"memory": "8Gi"})])],
        expected=ok(res("req-0", "gpu-0")),
    ),
    case(
        "dedicated-device-capacity-request-above-capacity",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "16Gi"}))],
        slices=[
            slice_(
                devices=[dev("gpu-0", capacity={"memory": "8Gi"}), dev("gpu-1", capacity={"memory": "16Gi"})]
            )
        ],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "dedicated-device-capacity-request-missing-capacity",
        claims=[claim("claim-0", req("req-0", capacity={"bandwidth": "1"}))],
        slices=[slice_(devices=[dev("gpu-0", capacity={"memory": "8Gi"})])],
        expected=unfit(),
    ),
    case(
        "dedicated-device-not-shared-between-claims",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "1Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "1Gi"})),
        ],
        slices=[slice_(devices=[dev("gpu-0", capacity={"memory": "8Gi"})])],
        expected=unfit(),
    ),
    case(
        "class-selector-excludes-multi-allocatable-devices",
        claims=[claim("claim-0", req("req-0", "exclusive"))],
        classes=[device_class("exclusive", selectors=["!device.allowMultipleAllocations"])],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi"), dev("gpu-1", capacity={"memory": "8Gi"})])],
        expected=ok(res("req-0", "gpu-1")),
    ),
    case(
        "class-selector-only-multi-allocatable-devices",
        claims=[claim("claim-0", req("req-0", "shared"))],
        classes=[device_class("shared", selectors=["device.allowMultipleAllocations"])],
        slices=[slice_(devices=[dev("gpu-0", capacity={"memory": "8Gi"}), _multi("gpu-1", memory="8Gi")])],
        expected=ok(share("req-0", "gpu-1", {"memory": "8Gi"})),
    ),
    # ------------------------------------------------------- combinations
    case(
        "prioritized-subrequest-with-smaller-capacity",
        claims=[
            claim(
                "claim-0",
                first(
                    "req-0",
                    sub("big", capacity={"memory": "16Gi"}),
                    sub("small", capacity={"memory": "2Gi"}),
                    sub("any"),
                ),
            )
        ],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        expected=ok(share("req-0/small", "gpu-0", {"memory": "2Gi"})),
    ),
    case(
        "distinct-attribute-stops-two-shares-of-one-device",
        claims=[
            claim(
                "claim-0",
                req("req-0", capacity={"memory": "1Gi"}),
                req("req-1", capacity={"memory": "1Gi"}),
                constraints=[distinct("gpu.example.com/uuid")],
            )
        ],
        slices=[slice_(devices=[dev("gpu-0", multi=True, attrs={"uuid": "u0"}, capacity={"memory": "8Gi"})])],
        expected=unfit(),
    ),
    case(
        "distinct-attribute-spreads-shares-over-devices",
        claims=[
            claim(
                "claim-0",
                req("req-0", capacity={"memory": "1Gi"}),
                req("req-1", capacity={"memory": "1Gi"}),
                constraints=[distinct("gpu.example.com/uuid")],
            )
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-0", multi=True, attrs={"uuid": "u0"}, capacity={"memory": "8Gi"}),
                    dev("gpu-1", multi=True, attrs={"uuid": "u1"}, capacity={"memory": "8Gi"}),
                ]
            )
        ],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"}), share("req-1", "gpu-1", {"memory": "1Gi"})),
    ),
    case(
        "match-attribute-with-shares-backtracks-across-claims",
        claims=[
            claim(
                "claim-0",
                req("req-0", capacity={"memory": "2Gi"}),
                req("req-1", capacity={"memory": "2Gi"}),
                constraints=[match("gpu.example.com/uuid")],
            ),
            claim("claim-1", req("req-0", capacity={"memory": "2Gi"})),
        ],
        slices=[
            slice_(
                devices=[
                    dev("gpu-s", multi=True, attrs={"uuid": "s"}, capacity={"memory": "2Gi"}),
                    dev("gpu-l", multi=True, attrs={"uuid": "l"}, capacity={"memory": "4Gi"}),
                ]
            )
        ],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-l", {"memory": "2Gi"}), share("req-1", "gpu-l", {"memory": "2Gi"})],
            claim_1=[share("req-0", "gpu-s", {"memory": "2Gi"})],
        ),
    ),
    case(
        "multi-device-counters-charged-once",
        claims=[
            claim("claim-0", req("req-0", capacity={"memory": "1Gi"})),
            claim("claim-1", req("req-0", capacity={"memory": "1Gi"})),
        ],
        slices=[
            slice_("a-counters", count=2, shared_counters=[counter_set("cs", {"units": "1"})]),
            slice_(
                "b-devices",
                count=2,
                devices=[
                    dev("gpu-0", multi=True, capacity={"memory": "4Gi"}, consumes={"cs": {"units": "1"}}),
                ],
            ),
        ],
        expected=ok_many(
            claim_0=[share("req-0", "gpu-0", {"memory": "1Gi"})],
            claim_1=[share("req-0", "gpu-0", {"memory": "1Gi"})],
        ),
    ),
    case(
        "multi-device-with-existing-share-consumes-counters",
        # gpu-0 already has a share in an existing claim, so its counters are in use and
        # gpu-1 (same counter set) does not fit.
        claims=[
            claim(
                "claim-0",
                req(
                    "req-0",
                    capacity={"memory": "1Gi"},
                    selectors=['device.attributes["gpu.example.com"].mode == "b"'],
                ),
            )
        ],
        slices=[
            slice_("a-counters", count=2, shared_counters=[counter_set("cs", {"units": "1"})]),
            slice_(
                "b-devices",
                count=2,
                devices=[
                    dev(
                        "gpu-0",
                        multi=True,
                        attrs={"mode": "a"},
                        capacity={"memory": "4Gi"},
                        consumes={"cs": {"units": "1"}},
                    ),
                    dev(
                        "gpu-1",
                        multi=True,
                        attrs={"mode": "b"},
                        capacity={"memory": "4Gi"},
                        consumes={"cs": {"units": "1"}},
                    ),
                ],
            ),
        ],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "1Gi"}))],
        expected=unfit(),
    ),
    case(
        "multi-device-existing-share-skips-counter-check",
        claims=[claim("claim-0", req("req-0", capacity={"memory": "1Gi"}))],
        slices=[
            slice_("a-counters", count=2, shared_counters=[counter_set("cs", {"units": "1"})]),
            slice_(
                "b-devices",
                count=2,
                devices=[
                    dev("gpu-0", multi=True, capacity={"memory": "4Gi"}, consumes={"cs": {"units": "1"}}),
                ],
            ),
        ],
        allocated=[allocated("old", old_share("gpu-0", {"memory": "1Gi"}))],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"})),
    ),
    case(
        "multi-device-admin-access-share",
        claims=[claim("claim-0", req("req-0", admin=True, capacity={"memory": "1Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="4Gi")])],
        expected=ok(share("req-0", "gpu-0", {"memory": "1Gi"}, adminAccess=True)),
    ),
    # ------------------------------------------- one capacity, two spellings
    # Kubernetes 1.38 (kubernetes/kubernetes#142202, "DRA consumable capacity + CEL: fix
    # name comparisons and lookup"): `memory` in a slice of gpu.example.com and
    # `gpu.example.com/memory` name the same capacity; 1.37 compared the names literally.
    # Upstream's cases of the same names (k8s.io/dynamic-resource-allocation v0.38.0-beta.0,
    # allocatortesting), ported: an `All` request, 1/2/4 for upstream's one/two/four, `foo`
    # and `bar` as its foreign domains; `-shared` on a device that allows several
    # allocations (then consumedCapacity keeps the slice's spelling), `-exclusive` not.
    *_TWO_SPELLINGS,
    case(
        "capacity-consumed-under-the-other-spelling-counts",
        # "the allocation result stored literally what came from the driver at the time of
        # allocation, which then wouldn't be considered after flipping to the other format"
        claims=[claim("claim-0", req("req-0", capacity={"memory": "4Gi"}))],
        slices=[slice_(devices=[_multi("gpu-0", memory="8Gi")])],
        allocated=[allocated("old", old_share("gpu-0", {"gpu.example.com/memory": "6Gi"}))],
        expected=unfit(),
    ),
]
