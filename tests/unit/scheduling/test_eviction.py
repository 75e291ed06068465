"""The pure half of device-taint eviction, with the cases of upstream's controller tests
(TestController, TestEviction, TestDeviceTaintRule, TestCancelEviction) in draco's shapes:
slices, rules, claims and pods go through `EvictionState` as watch events, and the pending
evictions, claim evictions and rule conditions are checked."""

from __future__ import annotations

import copy
import datetime
import itertools
import json
from typing import Any

import pytest

from draco.api.constants import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    SCHEDULING_GATE,
)
from draco.scheduling.eviction import (
    RULE_STATUS_PERIOD_S,
    Eviction,
    EvictionState,
    Origin,
    Rule,
    Taint,
    Update,
    claim_eviction,
    rule_condition,
    rule_status_due,
)

Obj = dict[str, Any]

DRIVER = "some-driver"
NODE = "worker"
NODE2 = "worker-2"
NAMESPACE = "default"
POD = "my-pod"
POD_UID = "1234"
CLAIM = "my-pod-my-resource"
TAINT_KEY = "example.com/taint"
TAINT_VALUE = "something"
TAINT_TIME = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
TAINT_STAMP = "2000-01-01T00:00:00Z"
TOLERATION_S = 60


def taint(effect: str = "NoExecute", *, key: str = TAINT_KEY, value: str | None = TAINT_VALUE) -> Obj:
    raw: Obj = {"key": key, "effect": effect, "timeAdded": TAINT_STAMP}
    if value is not None:
        raw["value"] = value
    return raw


def make_slice(
    name: str = "worker-slice", *, pool: str = NODE, generation: int = 1, devices: list[Obj] | None = None
) -> Obj:
    if devices is None:
        devices = [
            {"name": "instance"},
            {"name": "instance-no-schedule", "taints": [taint("NoSchedule", value=None)]},
            {
                "name": "instance-no-execute",
                "taints": [taint("None", value=None), taint("NoExecute", value=None)],
            },
        ]
    return {
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "pool": {"name": pool, "generation": generation}, "devices": devices},
    }


SLICE = make_slice()


def tainted_slice(*taints: Obj, generation: int = 1, name: str = "worker-slice") -> Obj:
    obj = make_slice(name, generation=generation)
    obj["spec"]["devices"][0]["taints"] = list(taints) or [taint()]
    return obj


def rule(
    name: str = "evict",
    *,
    uid: str = "rule-1234",
    effect: str = "NoExecute",
    selector: Obj | None = None,
    time_added: str = TAINT_STAMP,
    generation: int = 1,
    no_selector: bool = False,
) -> Obj:
    spec: Obj = {"taint": {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": effect, "timeAdded": time_added}}
    if not no_selector:
        spec["deviceSelector"] = selector if selector is not None else {"driver": DRIVER}
    return {"metadata": {"name": name, "uid": uid, "generation": generation}, "spec": spec}


def claim(
    name: str = CLAIM,
    *,
    namespace: str = NAMESPACE,
    pod: str = POD,
    pod_uid: str = POD_UID,
    owned: bool = True,
    reserved: bool = True,
    devices: tuple[str, ...] = ("instance",),
    tolerations: list[Obj] | None = None,
    allocated: bool = True,
    annotations: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"claim-{name}-{namespace}"}
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid, "controller": True}
        ]
    if annotations:
        meta["annotations"] = annotations
    status: Obj = {}
    if allocated:
        results = []
        for device in devices:
            result: Obj = {"request": "req-1", "driver": DRIVER, "pool": NODE, "device": device}
            if tolerations is not None:
                result["tolerations"] = tolerations
            results.append(result)
        status["allocation"] = {"devices": {"results": results}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": pod_uid}]
    return {"metadata": meta, "spec": {}, "status": status}


def pod(
    name: str = POD,
    *,
    namespace: str = NAMESPACE,
    uid: str = POD_UID,
    claim_name: str | None = CLAIM,
    template: bool = False,
    node: str | None = NODE,
    gated: bool = False,
) -> Obj:
    annotations: dict[str, str] = {}
    if claim_name is not None:
        if template:
            annotations[CLAIMS_ANNOTATION] = json.dumps(
                [{"name": "my-resource", "resourceClaimTemplateName": "my-template"}]
            )
            annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps({"my-resource": claim_name})
        else:
            annotations[CLAIMS_ANNOTATION] = json.dumps(
                [{"name": "my-resource", "resourceClaimName": claim_name}]
            )
    spec: Obj = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def toleration(
    seconds: int | None = None, *, key: str = TAINT_KEY, effect: str = "NoExecute", **extra: Any
) -> Obj:
    raw: Obj = {"key": key, "operator": "Exists", "effect": effect, **extra}
    if seconds is not None:
        raw["tolerationSeconds"] = seconds
    return raw


SLICE_ORIGIN = Origin(slice="worker-slice", driver=DRIVER, pool=NODE, device="instance", index=0)
RULE_ORIGIN = Origin(rule="evict", rule_uid="rule-1234")


def feed(state: EvictionState, *events: tuple[str, Obj, bool]) -> list[Update]:
    """Apply (kind, object, deleted) events and reconcile what they affect."""
    keys: set[str] = set()
    for kind, obj, deleted in events:
        keys |= getattr(state, f"on_{kind}")(obj, deleted=deleted)
    return state.reconcile(keys)


def add(kind: str, obj: Obj) -> tuple[str, Obj, bool]:
    return (kind, obj, False)


def remove(kind: str, obj: Obj) -> tuple[str, Obj, bool]:
    return (kind, obj, True)


def pending(state: EvictionState) -> dict[str, Eviction]:
    return {key: eviction for key, (_, eviction) in state.pending.items()}


def at(seconds: float = 0) -> datetime.datetime:
    return TAINT_TIME + datetime.timedelta(seconds=seconds)


# --- TestController: events in every order reach the same state --------------------------------


CASES: dict[str, tuple[list[tuple[str, Obj, bool]], dict[str, Eviction]]] = {
    "untainted-claim": ([add("slice", SLICE), add("claim", claim()), add("pod", pod())], {}),
    "tainted-claim-through-resourceslice, no pod": (
        [add("slice", tainted_slice()), add("claim", claim())],
        {},
    ),
    "evict-pod-resourceclaim (generated)": (
        [add("slice", tainted_slice()), add("claim", claim()), add("pod", pod(template=True))],
        {f"{NAMESPACE}/{POD}": Eviction(at(), (SLICE_ORIGIN,))},
    ),
    "evict-pod-user-claim": (
        [add("slice", tainted_slice()), add("claim", claim(owned=False)), add("pod", pod())],
        {f"{NAMESPACE}/{POD}": Eviction(at(), (SLICE_ORIGIN,))},
    ),
    "evict-pod-rule": (
        [add("claim", claim()), add("pod", pod()), add("rule", rule())],
        {f"{NAMESPACE}/{POD}": Eviction(at(), (RULE_ORIGIN,))},
    ),
    "evict-pod-rule-and-slice": (
        [add("slice", tainted_slice()), add("claim", claim()), add("pod", pod()), add("rule", rule())],
        {f"{NAMESPACE}/{POD}": Eviction(at(), (RULE_ORIGIN, SLICE_ORIGIN))},
    ),
    "evict-pod-rule-later": (
        [add("claim", claim(tolerations=[toleration(TOLERATION_S)])), add("pod", pod()), add("rule", rule())],
        {f"{NAMESPACE}/{POD}": Eviction(at(TOLERATION_S), (RULE_ORIGIN,))},
    ),
    "no-evict-rule-none": ([add("claim", claim()), add("pod", pod()), add("rule", rule(effect="None"))], {}),
    "no-evict-rule-noschedule": (
        [add("claim", claim()), add("pod", pod()), add("rule", rule(effect="NoSchedule"))],
        {},
    ),
    "no-evict-rule-without-selector": (
        [add("claim", claim()), add("pod", pod()), add("rule", rule(no_selector=True))],
        {},
    ),
    "no-evict-rule-other-device": (
        [add("claim", claim()), add("pod", pod()), add("rule", rule(selector={"device": "instance-other"}))],
        {},
    ),
    "no-evict-rule-other-pool": (
        [
            add("claim", claim()),
            add("pod", pod()),
            add("rule", rule(selector={"driver": DRIVER, "pool": NODE2})),
        ],
        {},
    ),
    "evict-rule-all-fields": (
        [
            add("claim", claim()),
            add("pod", pod()),
            add("rule", rule(selector={"driver": DRIVER, "pool": NODE, "device": "instance"})),
        ],
        {f"{NAMESPACE}/{POD}": Eviction(at(), (RULE_ORIGIN,))},
    ),
    "no-evict-forever-toleration": (
        [add("slice", tainted_slice()), add("claim", claim(tolerations=[toleration()])), add("pod", pod())],
        {},
    ),
    "no-evict-other-device": (
        [
            add("slice", tainted_slice()),
            add("claim", claim(devices=("instance-no-schedule",))),
            add("pod", pod()),
        ],
        {},
    ),
    "evict-device-with-noexecute-among-none": (
        [add("slice", SLICE), add("claim", claim(devices=("instance-no-execute",))), add("pod", pod())],
        {
            f"{NAMESPACE}/{POD}": Eviction(
                at(),
                (
                    Origin(
                        slice="worker-slice", driver=DRIVER, pool=NODE, device="instance-no-execute", index=1
                    ),
                ),
            )
        },
    ),
    "no-evict-unscheduled-pod": (
        [add("slice", tainted_slice()), add("claim", claim()), add("pod", pod(node=None))],
        {},
    ),
    "no-evict-gated-pod": (
        [add("slice", tainted_slice()), add("claim", claim()), add("pod", pod(gated=True))],
        {},
    ),
    "no-evict-not-reserved": (
        [add("slice", tainted_slice()), add("claim", claim(reserved=False)), add("pod", pod())],
        {},
    ),
    "no-evict-generated-claim-of-other-pod": (
        [add("slice", tainted_slice()), add("claim", claim(pod_uid="other")), add("pod", pod(template=True))],
        {},
    ),
    "no-evict-unallocated": (
        [add("slice", tainted_slice()), add("claim", claim(allocated=False)), add("pod", pod())],
        {},
    ),
    "no-evict-old-generation-taint": (
        [
            add("slice", tainted_slice(name="old", generation=1)),
            add("slice", make_slice("new", generation=2)),
            add("claim", claim()),
            add("pod", pod()),
        ],
        {},
    ),
    "evict-extended-resource-claim": (
        [
            add("slice", tainted_slice()),
            add("claim", claim("ext-claim", annotations={EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"})),
            add("pod", pod(claim_name=None)),
        ],
        {f"{NAMESPACE}/{POD}": Eviction(at(), (SLICE_ORIGIN,))},
    ),
    "no-evict-extended-claim-not-reserved": (
        [
            add("slice", tainted_slice()),
            add(
                "claim",
                claim("ext-claim", reserved=False, annotations={EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}),
            ),
            add("pod", pod(claim_name=None)),
        ],
        {},
    ),
    "no-evict-owned-claim-without-annotation": (
        [add("slice", tainted_slice()), add("claim", claim("owned")), add("pod", pod(claim_name=None))],
        {},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_events_in_any_order(name: str) -> None:
    events, want = CASES[name]
    for order in itertools.permutations(events):
        state = EvictionState()
        feed(state, *order)
        assert pending(state) == want, f"order {[e[0] for e in order]}"


# --- claim eviction times (TestEviction's tolerations) ----------------------------------------


def _claim_time(obj: Obj, *, slice_obj: Obj) -> Eviction | None:
    state = EvictionState()
    state.on_slice(slice_obj, deleted=False)
    return claim_eviction(obj, slice_taints=state.slice_taints(), rules=())


def test_minimum_of_several_tolerations() -> None:
    tolerations = [
        toleration(300),
        toleration(30, key=""),
        toleration(90, operator="Equal", value=TAINT_VALUE),
    ]
    eviction = _claim_time(claim(tolerations=tolerations), slice_obj=tainted_slice())
    assert eviction is not None and eviction.when == at(30)


def test_negative_toleration_seconds_count_as_zero() -> None:
    eviction = _claim_time(claim(tolerations=[toleration(-5)]), slice_obj=tainted_slice())
    assert eviction is not None and eviction.when == at(0)


def test_each_taint_is_tolerated_on_its_own() -> None:
    other = taint(key="example.com/other")
    # Tolerating the first taint forever leaves the second one.
    eviction = _claim_time(claim(tolerations=[toleration()]), slice_obj=tainted_slice(taint(), other))
    assert eviction is not None
    assert eviction.when == at(0)
    assert eviction.reasons == (
        Origin(slice="worker-slice", driver=DRIVER, pool=NODE, device="instance", index=1),
    )


def test_several_taints_minimum_time() -> None:
    later = dict(taint(key="example.com/other"), timeAdded="2000-01-01T00:01:00Z")
    tolerations = [toleration(100), toleration(10, key="example.com/other")]
    eviction = _claim_time(claim(tolerations=tolerations), slice_obj=tainted_slice(taint(), later))
    assert eviction is not None and eviction.when == at(70)
    assert len(eviction.reasons) == 2


def test_toleration_value_mismatch_does_not_tolerate() -> None:
    wrong = toleration(operator="Equal", value="other-value")
    eviction = _claim_time(claim(tolerations=[wrong]), slice_obj=tainted_slice())
    assert eviction is not None and eviction.when == at(0)


def test_only_noexecute_tolerations_count() -> None:
    # Upstream's controller ignores tolerations whose effect is not NoExecute, the empty
    # (wildcard) effect included.
    for effect in ("NoSchedule", ""):
        eviction = _claim_time(claim(tolerations=[toleration(effect=effect)]), slice_obj=tainted_slice())
        assert eviction is not None, effect


def test_taint_without_time_counts_from_object_creation() -> None:
    raw = {"key": TAINT_KEY, "effect": "NoExecute"}
    obj = tainted_slice(raw)
    obj["metadata"]["creationTimestamp"] = "2000-01-01T00:00:05Z"
    eviction = _claim_time(claim(tolerations=[toleration(10)]), slice_obj=obj)
    assert eviction is not None and eviction.when == at(15)


def test_unknown_effect_is_informational() -> None:
    assert _claim_time(claim(), slice_obj=tainted_slice(taint("unknown-effect"))) is None


def test_rule_selector_semantics() -> None:
    device = (DRIVER, NODE, "instance")
    assert not Rule.from_object(rule(no_selector=True)).matches(device)
    assert Rule.from_object(rule(selector={})).matches(device)
    assert Rule.from_object(rule(selector={"pool": NODE})).matches(device)
    assert not Rule.from_object(rule(selector={"driver": DRIVER, "device": "x"})).matches(device)


# --- TestCancelEviction -----------------------------------------------------------------------


KEY = f"{NAMESPACE}/{POD}"


def _evicting_state(*extra: tuple[str, Obj, bool]) -> EvictionState:
    state = EvictionState()
    updates = feed(state, add("slice", tainted_slice()), add("claim", claim()), add("pod", pod()), *extra)
    assert [u.pod for u in updates] == [KEY]
    return state


def test_cancel_when_taint_removed() -> None:
    state = _evicting_state()
    (update,) = feed(state, add("slice", SLICE))
    assert update == Update(KEY, POD_UID, None) and update.announce
    assert update.previous == Eviction(at(), (SLICE_ORIGIN,))
    assert state.pending == {}


def test_cancel_when_slice_deleted() -> None:
    state = _evicting_state()
    assert feed(state, remove("slice", tainted_slice())) == [Update(KEY, POD_UID, None)]


def test_cancel_when_slice_moves_to_another_pool() -> None:
    state = _evicting_state()
    moved = tainted_slice()
    moved["spec"]["pool"]["name"] = "elsewhere"
    # The claim's device (pool "worker") is no longer published by anyone: not tainted.
    assert feed(state, add("slice", moved)) == [Update(KEY, POD_UID, None)]
    assert set(state.pools) == {(DRIVER, "elsewhere")}
    # Moving back taints it again; deleting it from its new pool leaves nothing.
    assert [u.pod for u in feed(state, add("slice", tainted_slice()))] == [KEY]
    assert set(state.pools) == {(DRIVER, NODE)}
    assert feed(state, remove("slice", tainted_slice())) == [Update(KEY, POD_UID, None)]
    assert state.pools == {}


def test_cancel_when_newer_generation_drops_taint() -> None:
    state = _evicting_state()
    assert feed(state, add("slice", make_slice("worker-slice-2", generation=2))) == [
        Update(KEY, POD_UID, None)
    ]
    # The old generation going away afterwards changes nothing.
    assert feed(state, remove("slice", tainted_slice())) == []


def test_older_generation_appearing_changes_nothing() -> None:
    state = EvictionState()
    feed(state, add("slice", make_slice("new", generation=3)), add("claim", claim()), add("pod", pod()))
    assert feed(state, add("slice", tainted_slice(name="old", generation=2))) == []


def test_cancel_when_rule_deleted() -> None:
    state = EvictionState()
    feed(state, add("claim", claim()), add("pod", pod()), add("rule", rule()))
    assert KEY in state.pending
    assert feed(state, remove("rule", rule())) == [Update(KEY, POD_UID, None)]


def test_cancel_when_rule_effect_changes_to_none() -> None:
    state = EvictionState()
    feed(state, add("claim", claim()), add("pod", pod()), add("rule", rule()))
    assert feed(state, add("rule", rule(effect="None", generation=2))) == [Update(KEY, POD_UID, None)]


def test_pod_deleted_leaves_silently() -> None:
    state = _evicting_state()
    (update,) = feed(state, remove("pod", pod()))
    assert (update.eviction, update.announce) == (None, False)
    assert update.previous == Eviction(at(), (SLICE_ORIGIN,))
    assert state.pending == {}


def test_pod_being_deleted_leaves_silently() -> None:
    state = _evicting_state()
    going = pod()
    going["metadata"]["deletionTimestamp"] = "2000-01-01T00:00:01Z"
    assert [u.announce for u in feed(state, add("pod", going))] == [False]
    assert state.pending == {}


def test_namesake_pod_is_not_the_one_pending() -> None:
    state = _evicting_state()
    # Same name, new UID, not reserved in the claim: not evicted, and the old entry is gone.
    assert [(u.uid, u.eviction, u.announce) for u in feed(state, add("pod", pod(uid="new-uid")))] == [
        (POD_UID, None, False)
    ]
    assert state.pending == {}


def test_claim_deallocated_cancels() -> None:
    state = _evicting_state()
    assert feed(state, add("claim", claim(allocated=False))) == [Update(KEY, POD_UID, None)]


def test_rule_later_time_moves_eviction() -> None:
    state = EvictionState()
    feed(state, add("claim", claim()), add("pod", pod()), add("rule", rule()))
    updates = feed(state, add("rule", rule(time_added="2000-01-01T00:00:40Z", generation=2)))
    assert updates == [Update(KEY, POD_UID, Eviction(at(40), (RULE_ORIGIN,)))]


def test_terminal_pod_not_evicted() -> None:
    done = pod()
    done["status"]["phase"] = "Succeeded"
    state = EvictionState()
    feed(state, add("slice", tainted_slice()), add("claim", claim()), add("pod", done))
    assert state.pending == {}


def test_unchanged_pod_event_is_ignored() -> None:
    state = _evicting_state()
    again = copy.deepcopy(pod())
    again["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    assert state.on_pod(again, deleted=False) == set()


def test_evicted_forgets_only_same_uid() -> None:
    state = _evicting_state()
    state.evicted(KEY, "other")
    assert KEY in state.pending
    state.evicted(KEY, POD_UID)
    assert KEY not in state.pending


# --- TestDeviceTaintRule: the EvictionInProgress condition --------------------------------------


def _two_namespaces(state: EvictionState, rule_obj: Obj) -> None:
    feed(
        state,
        add("slice", SLICE),
        add("claim", claim()),
        add("pod", pod()),
        add("claim", claim(namespace="other", pod_uid="uid-2")),
        add("pod", pod(namespace="other", uid="uid-2")),
        add("rule", rule_obj),
    )


def test_condition_pending_many_namespaces() -> None:
    state = EvictionState()
    _two_namespaces(state, rule())
    the_rule = state.rules["evict"]
    condition = rule_condition(the_rule, pending=state.pending_for_rule(the_rule), evicted=0)
    assert condition["status"] == "True"
    assert condition["reason"] == "PodsPendingEviction"
    assert condition["message"] == "2 pods need to be evicted in 2 different namespaces."
    assert condition["observedGeneration"] == 1


def test_condition_one_pod() -> None:
    state = EvictionState()
    feed(state, add("claim", claim()), add("pod", pod()), add("rule", rule()))
    the_rule = state.rules["evict"]
    condition = rule_condition(the_rule, pending=state.pending_for_rule(the_rule), evicted=0)
    assert condition["message"] == "1 pod needs to be evicted in 1 namespace."


def test_condition_completed_and_not_started() -> None:
    the_rule = Rule.from_object(rule())
    completed = rule_condition(the_rule, pending={}, evicted=2)
    assert (completed["status"], completed["reason"]) == ("False", "Completed")
    assert completed["message"] == "2 pods evicted since starting the controller."
    one = rule_condition(the_rule, pending={}, evicted=1)
    assert one["message"] == "1 pod evicted since starting the controller."
    assert rule_condition(the_rule, pending={}, evicted=0) | {"message": ""} == {
        "type": "EvictionInProgress",
        "status": "False",
        "reason": "NotStarted",
        "message": "",
        "observedGeneration": 1,
    }


def test_condition_other_effect() -> None:
    condition = rule_condition(Rule.from_object(rule(effect="NoSchedule")), pending={}, evicted=0)
    assert condition["reason"] == "OtherEffect"
    assert condition["message"] == "Eviction only happens for the NoExecute effect."


def test_condition_none_simulation_names_pods() -> None:
    state = EvictionState()
    _two_namespaces(state, rule(effect="None"))
    assert state.pending == {}
    the_rule = state.rules["evict"]
    simulation = state.simulate(the_rule)
    assert simulation.published_devices == 3
    assert simulation.allocated_devices == 2
    assert simulation.pods == {"default": (POD,), "other": (POD,)}
    condition = rule_condition(the_rule, pending={}, evicted=0, simulation=simulation)
    assert condition["reason"] == "NoEffect"
    assert condition["status"] == "False"
    assert condition["message"] == (
        "3 published devices selected. 2 allocated devices selected. 2 pods would be evicted in "
        "2 different namespaces if the effect was NoExecute: default (my-pod), other (my-pod). "
        "Kept up to date while the effect is None."
    )
    # The simulation leaves the real state alone.
    assert state.pending == {} and state.claim_evictions == {}


def test_simulation_respects_tolerations_and_single_namespace() -> None:
    state = EvictionState()
    feed(
        state,
        add("slice", SLICE),
        add("claim", claim(tolerations=[toleration()])),
        add("pod", pod()),
        add("rule", rule(effect="None")),
    )
    simulation = state.simulate(state.rules["evict"])
    assert simulation.allocated_devices == 1 and simulation.pods == {}
    message = rule_condition(state.rules["evict"], pending={}, evicted=0, simulation=simulation)["message"]
    assert message.startswith(
        "3 published devices selected. 1 allocated device selected. 0 pods would be evicted in 0 different "
        "namespaces if the effect was NoExecute."
    )


def test_simulation_caps_named_pods() -> None:
    state = EvictionState()
    events = [add("slice", SLICE), add("rule", rule(effect="None"))]
    for i in range(60):
        events += [
            add("claim", claim(f"c{i:02}", pod=f"p{i:02}", pod_uid=f"u{i}")),
            add("pod", pod(f"p{i:02}", uid=f"u{i}", claim_name=f"c{i:02}")),
        ]
    feed(state, *events)
    simulation = state.simulate(state.rules["evict"])
    message = rule_condition(state.rules["evict"], pending={}, evicted=0, simulation=simulation)["message"]
    assert "60 pods would be evicted in 1 namespace" in message
    assert "p49, ...) and 10 more." in message


def test_status_written_at_most_every_period() -> None:
    base = Rule.from_object(rule())
    desired = rule_condition(base, pending={"default": ["a"]}, evicted=0)
    assert rule_status_due(base, desired, now=at()) == (True, None)
    written = dict(desired, lastTransitionTime=TAINT_STAMP)
    shown = Rule(base.name, base.uid, base.generation, base.selector, base.taint, written)
    assert rule_status_due(shown, desired, now=at(3)) == (False, None)  # nothing changed
    changed = rule_condition(base, pending={}, evicted=1)
    assert rule_status_due(shown, changed, now=at(3)) == (False, RULE_STATUS_PERIOD_S - 3)
    assert rule_status_due(shown, changed, now=at(RULE_STATUS_PERIOD_S)) == (True, None)
    # A new generation is written at once.
    newer = Rule(base.name, base.uid, 2, base.selector, base.taint, written)
    assert rule_status_due(newer, rule_condition(newer, pending={}, evicted=1), now=at(3)) == (True, None)


def test_taint_from_json_defaults() -> None:
    parsed = Taint.from_json({"key": "k", "effect": "NoExecute"}, default_time=None)
    assert parsed.time_added.year == 1970 and parsed.value == ""


def test_pods_are_read_from_the_lookup_given_and_not_copied() -> None:
    informer: dict[str, Obj] = {}  # what the pod informer holds, updated before it reports
    state = EvictionState(pods=informer)
    feed(state, add("slice", tainted_slice()), add("claim", claim()))
    informer[KEY] = pod()
    assert [u.pod for u in feed(state, add("pod", pod()))] == [KEY]
    del informer[KEY]
    assert feed(state, remove("pod", pod())) == [
        Update(KEY, POD_UID, None, previous=Eviction(at(), (SLICE_ORIGIN,)), announce=False)
    ]
    assert state.pending == {}
