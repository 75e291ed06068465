"""The pod webhook's patch: the native shape becomes draco's annotation, the gate is added
where draco must allocate, and a second pass changes nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULER_NAME, SCHEDULING_GATE
from draco.scheduling.extendedresources import resource_class_map
from draco.scheduling.podclaims import parse_pod_claims
from draco.webhook.pods import changed_claims_warnings, native_claim_warnings, pod_patch, reapply_patch

CLASSES = {"example.com/gpu": "gpu.example.com", "deviceclass.resource.draco.dev/gpu": "gpu"}


def _apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/remove, enough for the operations pod_patch emits."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target: Any = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        elif isinstance(target, list):
            target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
        else:
            target[last] = op["value"]
    return doc


def _mutated(pod: dict[str, Any], *, translate: bool = True) -> dict[str, Any]:
    once = _apply(pod, pod_patch(pod, extended_resources=CLASSES, translate=translate))
    assert pod_patch(once, extended_resources=CLASSES, translate=translate) == []  # idempotent
    return once


def _pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-"}, "spec": spec}


def _gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def test_the_native_shape_becomes_the_annotation_with_per_container_requests() -> None:
    pod = _pod(
        resourceClaims=[
            {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
            {"name": "shared", "resourceClaimName": "shared-nic"},
            {"name": "unused", "resourceClaimTemplateName": "t"},
        ],
        initContainers=[{"name": "setup", "image": "x", "resources": {"claims": [{"name": "shared"}]}}],
        containers=[
            {"name": "a", "image": "x", "resources": {"claims": [{"name": "gpus", "request": "first"}]}},
            {"name": "b", "image": "x", "resources": {"claims": [{"name": "gpus"}, {"name": "shared"}]}},
            {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}},
        ],
    )
    out = _mutated(pod)
    assert "resourceClaims" not in out["spec"]
    assert all(
        "claims" not in c["resources"] for c in out["spec"]["containers"] + out["spec"]["initContainers"]
    )
    assert out["spec"]["containers"][2]["resources"] == {"limits": {"cpu": "1"}}
    assert _gates(out) == [SCHEDULING_GATE]
    claims = {c.name: c for c in parse_pod_claims(out)}
    assert claims["gpus"].resource_claim_template_name == "two-gpus"
    assert claims["gpus"].requests_for("a") == frozenset({"first"})
    assert claims["gpus"].requests_for("b") is None and not claims["gpus"].gives_to("c")
    assert claims["shared"].resource_claim_name == "shared-nic"
    assert claims["shared"].gives_to("setup") and claims["shared"].gives_to("b")
    assert not claims["shared"].gives_to("a")
    # Referenced by no container: allocated, injected nowhere (as upstream).
    assert claims["unused"].containers == ()


def test_kubernetes_1_30s_shape_is_translated_too() -> None:
    pod = _pod(
        resourceClaims=[{"name": "gpu", "source": {"resourceClaimTemplateName": "one-gpu"}}],
        containers=[{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
    )
    out = _mutated(pod)
    assert "resourceClaims" not in out["spec"]
    (claim,) = parse_pod_claims(out)
    assert (claim.name, claim.resource_claim_template_name) == ("gpu", "one-gpu")
    assert claim.gives_to("main")
    assert native_claim_warnings(pod) == []


def test_an_entry_naming_nothing_is_not_translated_and_warned_about() -> None:
    """What a kube-apiserver before 1.31 hands the webhook for today's shape: the template
    name dropped at decoding, an empty `source` left."""
    lost = _pod(
        resourceClaims=[{"name": "gpu", "source": {}}],
        containers=[{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
    )
    assert pod_patch(lost, extended_resources=CLASSES, translate=True) == []
    (warning,) = native_claim_warnings(lost)
    assert warning.startswith("spec.resourceClaims[0] (gpu): names neither")
    assert "before 1.31" in warning and CLAIMS_ANNOTATION in warning
    # Beside a good entry: the good one is translated, the lost one still warned about.
    mixed = _pod(resourceClaims=[{"name": "gpu"}, {"name": "nic", "resourceClaimName": "nic-0"}])
    (claim,) = parse_pod_claims(_mutated(mixed))
    assert claim.resource_claim_name == "nic-0"
    assert len(native_claim_warnings(mixed)) == 1


def test_an_annotated_pod_gets_the_gate_and_keeps_its_annotation() -> None:
    raw = "- {name: gpu, resourceClaimTemplateName: t}\n"
    pod = _pod(containers=[{"name": "a", "image": "x"}], schedulingGates=[{"name": "other"}])
    pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: raw}
    out = _mutated(pod)
    assert out["metadata"]["annotations"][CLAIMS_ANNOTATION] == raw
    assert _gates(out) == ["other", SCHEDULING_GATE]


def test_annotation_entries_win_over_native_entries_of_the_same_name() -> None:
    pod = _pod(
        resourceClaims=[
            {"name": "gpu", "resourceClaimName": "native"},
            {"name": "nic", "resourceClaimName": "n"},
        ],
        containers=[{"name": "a", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
    )
    pod["metadata"]["annotations"] = {
        CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimName": "mine"}])
    }
    claims = {c.name: c for c in parse_pod_claims(_mutated(pod))}
    assert claims["gpu"].resource_claim_name == "mine" and claims["nic"].resource_claim_name == "n"


def test_without_translation_the_native_shape_is_left_to_native_dra() -> None:
    pod = _pod(
        resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}],
        containers=[{"name": "a", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
    )
    assert pod_patch(pod, extended_resources=CLASSES, translate=False) == []


def test_extended_resources_backed_by_a_class_are_gated_others_not() -> None:
    backed = _pod(containers=[{"name": "a", "image": "x", "resources": {"limits": {"example.com/gpu": "2"}}}])
    assert _gates(_mutated(backed)) == [SCHEDULING_GATE]
    implicit = _pod(
        initContainers=[
            {
                "name": "i",
                "image": "x",
                "resources": {"requests": {"deviceclass.resource.draco.dev/gpu": "1"}},
            }
        ],
        containers=[{"name": "a", "image": "x"}],
    )
    assert _gates(_mutated(implicit)) == [SCHEDULING_GATE]
    unmapped = _pod(
        containers=[{"name": "a", "image": "x", "resources": {"limits": {"vendor.io/fpga": "1"}}}]
    )
    assert pod_patch(unmapped, extended_resources=CLASSES, translate=True) == []
    plain = _pod(containers=[{"name": "a", "image": "x"}])
    assert pod_patch(plain, extended_resources=CLASSES, translate=True) == []


def test_upstreams_implicit_name_is_gated_like_dracos() -> None:
    """dra-example-driver's extended-resource pod asks for its class by upstream's name."""
    classes = resource_class_map([{"metadata": {"name": "gpu.example.com"}, "spec": {}}])
    for name in (
        "deviceclass.resource.kubernetes.io/gpu.example.com",
        "deviceclass.resource.draco.dev/gpu.example.com",
    ):
        pod = _pod(containers=[{"name": "ctr0", "image": "x", "resources": {"limits": {name: "1"}}}])
        assert _gates(_apply(pod, pod_patch(pod, extended_resources=classes, translate=True))) == [
            SCHEDULING_GATE
        ]
    other = _pod(
        containers=[
            {
                "name": "a",
                "image": "x",
                "resources": {"limits": {"deviceclass.resource.kubernetes.io/nic": "1"}},
            }
        ]
    )
    assert pod_patch(other, extended_resources=classes, translate=True) == []


def _manifest() -> dict[str, Any]:
    return _pod(
        resourceClaims=[
            {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
            {"name": "shared", "resourceClaimName": "shared-nic"},
        ],
        initContainers=[{"name": "setup", "image": "x", "resources": {"claims": [{"name": "shared"}]}}],
        containers=[
            {"name": "a", "image": "x", "resources": {"claims": [{"name": "gpus", "request": "first"}]}},
            {"name": "b", "image": "x", "resources": {"claims": [{"name": "gpus"}, {"name": "shared"}]}},
        ],
    )


def _reapplied(live: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What `kubectl apply` of `manifest` again makes of `live` (the native fields are back;
    what the webhook and operator added stays)."""
    out = copy.deepcopy(live)
    out["spec"]["resourceClaims"] = copy.deepcopy(manifest["spec"]["resourceClaims"])
    for key in ("initContainers", "containers"):
        for container, given in zip(out["spec"][key], manifest["spec"][key], strict=True):
            container["resources"] = copy.deepcopy(given["resources"])
    return out


def test_reapplying_the_translated_manifest_changes_nothing() -> None:
    manifest = _manifest()
    live = _mutated(manifest)
    live["spec"]["schedulingGates"] = []  # un-gated and pinned by the operator meanwhile
    live["spec"]["affinity"] = {"nodeAffinity": {}}
    update = _reapplied(live, manifest)
    assert update != live
    assert _apply(update, reapply_patch(update, old=live)) == live
    # A server-side apply may also drop the annotation it does not carry: it is kept.
    del update["metadata"]["annotations"]
    assert _apply(update, reapply_patch(update, old=live)) == live
    # Nothing to do when the native fields are not brought back.
    assert reapply_patch(live, old=live) == []


def test_a_real_change_of_the_claims_is_left_for_the_api_server_to_refuse() -> None:
    manifest = _manifest()
    live = _mutated(manifest)
    changed = copy.deepcopy(manifest)
    changed["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "four-gpus"
    assert reapply_patch(_reapplied(live, changed), old=live) == []
    added = copy.deepcopy(manifest)
    added["spec"]["resourceClaims"].append({"name": "more", "resourceClaimName": "x"})
    assert reapply_patch(_reapplied(live, added), old=live) == []
    moved = copy.deepcopy(manifest)
    moved["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    assert reapply_patch(_reapplied(live, moved), old=live) == []
    # A pod draco did not translate (no annotation), or one that kept its native fields.
    assert reapply_patch(manifest, old=_pod(containers=[{"name": "a"}])) == []
    assert reapply_patch(manifest, old=manifest) == []
    # Where the API server drops the field instead of refusing, kubectl shows a warning.
    (warning,) = changed_claims_warnings(_reapplied(live, changed), old=live)
    assert warning.startswith("spec.resourceClaims (gpus): differ from the claims this pod was created with")
    assert changed_claims_warnings(_reapplied(live, manifest), old=live) == []
    assert changed_claims_warnings(manifest, old=manifest) == []


def test_a_broken_annotation_is_left_for_the_operator_to_report() -> None:
    pod = _pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}], containers=[{"name": "a"}])
    pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: "not: [a list"}
    out = _mutated(pod)
    assert out["metadata"]["annotations"][CLAIMS_ANNOTATION] == "not: [a list"
    assert out["spec"]["resourceClaims"] and _gates(out) == [SCHEDULING_GATE]


def test_a_pod_of_a_draco_pod_group_is_gated_claims_or_not() -> None:
    pod = _pod(containers=[{"name": "a", "image": "x"}])
    assert pod_patch(pod, extended_resources=CLASSES, translate=True) == []
    pod["metadata"]["labels"] = {"scheduling.draco.dev/pod-group": "train"}
    assert _gates(_mutated(pod)) == [SCHEDULING_GATE]


def test_with_pod_binding_draco_the_pod_names_draco_instead_of_the_gate() -> None:
    raw = "- {name: gpu, resourceClaimTemplateName: t}\n"
    for spec in ({}, {"schedulerName": "default-scheduler"}):
        pod = _pod(containers=[{"name": "a", "image": "x"}], **spec)
        pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: raw}
        ops = pod_patch(pod, extended_resources=CLASSES, translate=True, binding="draco")
        out = _apply(pod, ops)
        assert out["spec"]["schedulerName"] == SCHEDULER_NAME
        assert _gates(out) == []
        assert pod_patch(out, extended_resources=CLASSES, translate=True, binding="draco") == []
    # A workload's template brought the gate: it goes, other gates stay.
    gated = _pod(
        containers=[{"name": "a", "image": "x"}],
        schedulingGates=[{"name": SCHEDULING_GATE}, {"name": "other"}],
    )
    gated["metadata"]["annotations"] = {CLAIMS_ANNOTATION: raw}
    out = _apply(gated, pod_patch(gated, extended_resources=CLASSES, translate=True, binding="draco"))
    assert (out["spec"]["schedulerName"], _gates(out)) == (SCHEDULER_NAME, ["other"])
    # A pod naming another scheduler is gated as before: that scheduler binds it once pinned.
    other = _pod(containers=[{"name": "a", "image": "x"}], schedulerName="volcano")
    other["metadata"]["annotations"] = {CLAIMS_ANNOTATION: raw}
    out = _apply(other, pod_patch(other, extended_resources=CLASSES, translate=True, binding="draco"))
    assert (out["spec"]["schedulerName"], _gates(out)) == ("volcano", [SCHEDULING_GATE])
    # A pod without claims is left alone.
    plain = _pod(containers=[{"name": "a", "image": "x"}])
    assert pod_patch(plain, extended_resources=CLASSES, translate=True, binding="draco") == []


def test_a_pod_that_names_draco_itself_is_never_gated() -> None:
    """Whatever the binding mode: draco binds it, and the API server refuses to bind a gated pod."""
    pod = _pod(containers=[{"name": "a", "image": "x"}], schedulerName=SCHEDULER_NAME)
    pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: "- {name: gpu, resourceClaimTemplateName: t}\n"}
    assert _mutated(pod) == pod


def test_a_demand_pod_is_left_alone() -> None:
    """A demand pod asks for a mapped extended resource, yet is never gated: nothing places
    it (it asks autoscalers for a node, docs/autoscaling.md)."""
    from draco.scheduling.demand import DEMAND_SCHEDULER

    pod = {
        "metadata": {"name": "demand-x", "namespace": "draco"},
        "spec": {
            "schedulerName": DEMAND_SCHEDULER,
            "containers": [{"name": "demand", "resources": {"limits": {"example.com/gpu": "1"}}}],
        },
    }
    assert pod_patch(pod, extended_resources=CLASSES, translate=True) == []
    pod["spec"]["schedulerName"] = "default-scheduler"
    assert pod_patch(pod, extended_resources=CLASSES, translate=True) != []
