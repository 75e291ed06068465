"""The pod webhook of `draco webhook`, called by kube-apiserver over TLS: the Job of the
Kubernetes DRA task docs (examples/native-shape/job.yaml, upstream's manifest with only the
DRA objects' apiVersion changed) has its pods translated, gated, allocated by the operator
and un-gated; a bare pod of the native shape can be applied again (`kubectl apply` twice),
a change of its claims is refused (or, where the server drops the field, changes nothing);
a pod asking for a class-backed extended resource (by draco's or upstream's implicit name,
or the class's own) is gated, also when the class comes in the same manifest as the pod;
a namespace that did not opt in is left alone; and with the
webhook down, a pod that could concern draco is refused in the opted-in namespace
(failurePolicy Fail: admitted, it would wait untranslated for ever) and made again through
the webhook once it is back (the Job controller's next try), while pods elsewhere are
created as written and an untranslated one gets a Warning saying why. On servers whose Pod API cannot
carry today's `spec.resourceClaims` (1.30; 1.31-1.33 with the DynamicResourceAllocation
gate off) the test checks what docs/pods.md promises there instead: 1.30 names the fields
it refuses and the webhook warns about entries that lost their claim, 1.30's own shape is
translated, and the server's dropping of the field is all there is to see.

There is no controller-manager here: the test creates the pod the Job controller would
(its template, `generateName`, the Job as controller), which passes through admission as
a Job's pods do."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.api.constants import CLAIMS_ANNOTATION
from draco.scheduling.podclaims import parse_pod_claims
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.agent_support import unique
from tests.e2e.support import DracoProcess, running_webhook, start_operator, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OPT_IN = "resource.draco.dev/pod-webhook=enabled"
DRIVER = "driver.example.com"


def _docs_objects(namespace: str) -> list[dict[str, Any]]:
    objects = list(yaml.safe_load_all((ROOT / "examples" / "native-shape" / "job.yaml").read_text()))
    for obj in objects:
        if obj["kind"] != "DeviceClass":
            obj["metadata"]["namespace"] = namespace
    return objects


def _slice(node: str) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"type": {"string": "gpu"}},
            "capacity": {"memory": {"value": "64Gi"}},
        }
        for i in range(4)
    ]
    return {
        "apiVersion": "resource.draco.dev/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": devices,
        },
    }


def _create(kube: ControlPlane, obj: dict[str, Any], *, lenient: bool = False) -> dict[str, Any]:
    """Create `obj`; `lenient`: unknown fields dropped, as a controller's typed client has
    them dropped (kubectl refuses them on a server whose Pod API lacks them)."""
    flags = ("--validate=false",) if lenient else ()
    out = kube.kubectl("create", *flags, "-o", "json", "-f", "-", input=json.dumps(obj))
    created: dict[str, Any] = json.loads(out.stdout)
    return created


def _keeps_pod_claims(kube: ControlPlane, namespace: str) -> bool:
    """Whether this kube-apiserver keeps `spec.resourceClaims` of a pod (Kubernetes 1.34+,
    or 1.31-1.33 with the DynamicResourceAllocation gate on); `namespace` did not opt in."""
    out = kube.kubectl(
        "create", "--dry-run=server", "--validate=false", "-o", "json", "-f", "-",
        input=json.dumps(_native_pod(namespace)),
    )  # fmt: skip
    return bool(json.loads(out.stdout)["spec"].get("resourceClaims"))


def _without_pod_claims(job: dict[str, Any]) -> dict[str, Any]:
    job = json.loads(json.dumps(job))
    spec = job["spec"]["template"]["spec"]
    spec.pop("resourceClaims", None)
    for container in spec["containers"]:
        container.get("resources", {}).pop("claims", None)
    return job


def _in_1_30_shape(pod: dict[str, Any]) -> dict[str, Any]:
    """Kubernetes 1.30's shape of `spec.resourceClaims`: the claim under `source`."""
    pod = json.loads(json.dumps(pod))
    pod["spec"]["resourceClaims"] = [
        {"name": e["name"], "source": {k: v for k, v in e.items() if k != "name"}}
        for e in pod["spec"]["resourceClaims"]
    ]
    return pod


def _pod_of_job(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller makes from the Job's template."""
    template = job["spec"]["template"]
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **(template.get("metadata") or {}),
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"],
    }


def _native_pod(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "native-", "namespace": namespace},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "some-claim"}],
            "containers": [{"name": "main", "image": "registry.invalid/none", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }  # fmt: skip


@pytest.fixture
def other_namespace(kube: ControlPlane) -> Iterator[str]:
    name = unique("not-opted-in")
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl(
        "delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", "--wait=false", check=False
    )
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_the_dra_docs_job_runs_through_the_pod_webhook(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess], namespace: str, other_namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    kube.kubectl("label", "namespace", namespace, OPT_IN)
    node = f"{namespace}-n0"[:63]
    k.add_nodes(kube, [k.node(node)])
    k.apply(kube, [_slice(node)])
    objects = _docs_objects(namespace)
    with running_webhook(kube, tmp_path / "webhook") as webhook:
        k.apply(kube, [o for o in objects if o["kind"] != "Job"])
        native_pods = _keeps_pod_claims(kube, other_namespace)
        (manifest,) = [o for o in objects if o["kind"] == "Job"]
        made = kube.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(manifest), check=False)
        # Kubernetes 1.30 refuses today's shape by name: manifests there use 1.30's shape.
        shape: Callable[[dict[str, Any]], dict[str, Any]] = (
            (lambda o: o) if made.returncode == 0 else _in_1_30_shape
        )
        if made.returncode == 0:
            # The workload webhook translated the Job's template before the API server
            # stored it (1.31-1.33 without the DynamicResourceAllocation gate would have
            # dropped its resourceClaims): the pods the Job makes name their claims.
            job = json.loads(made.stdout)
            template = job["spec"]["template"]
            assert "resourceClaims" not in template["spec"], template
            assert CLAIMS_ANNOTATION in template["metadata"]["annotations"] and k.is_gated(template)
        else:
            # 1.30 refuses today's shape by name (docs/pods.md). The test goes on with the
            # pod the template describes.
            assert "unknown field" in made.stderr and "resourceClaimTemplateName" in made.stderr, made.stderr
            made = kube.kubectl(
                "create", "-o", "json", "-f", "-", input=json.dumps(_without_pod_claims(manifest))
            )
            job = {**manifest, "metadata": json.loads(made.stdout)["metadata"]}
        start_operator(draco_process, namespace, other_namespace)
        as_sent = kube.kubectl(
            "create", "--validate=false", "-o", "json", "-f", "-", input=json.dumps(_pod_of_job(job))
        )
        pod = json.loads(as_sent.stdout)
        if CLAIMS_ANNOTATION not in (pod["metadata"].get("annotations") or {}):
            # Kubernetes 1.30 decodes today's shape into its own and loses the claim names:
            # the webhook says so in kubectl's output; 1.30's own shape is translated.
            assert "Warning: spec.resourceClaims[0] (separate-gpu-claim): names neither" in as_sent.stderr
            assert "Warning: spec.resourceClaims[1] (shared-gpu-claim): names neither" in as_sent.stderr
            kube.kubectl("delete", "pod", "-n", namespace, pod["metadata"]["name"], "--wait=false")
            pod = _create(kube, _in_1_30_shape(_pod_of_job(job)))
        name = pod["metadata"]["name"]

        # Translated at admission: the native fields are gone, the annotation says the same.
        assert "resourceClaims" not in pod["spec"]
        assert all("claims" not in (c.get("resources") or {}) for c in pod["spec"]["containers"])
        claims = {c.name: c for c in parse_pod_claims(pod)}
        assert claims["separate-gpu-claim"].resource_claim_template_name == "example-resource-claim-template"
        assert claims["separate-gpu-claim"].containers == ("container0",)
        assert claims["shared-gpu-claim"].resource_claim_name == "example-resource-claim"
        assert claims["shared-gpu-claim"].containers == ("container1", "container2")
        assert k.is_gated(pod)

        # Allocated by the operator, pinned and un-gated.
        settled = wait_for(
            lambda: (p := k.get(kube, "pod", name, namespace=namespace)) and not k.is_gated(p) and p,
            timeout=90,
            what="the Job's pod to be allocated and un-gated",
        )
        assert isinstance(settled, dict) and k.pinned_node(settled) == node
        shared = k.get(
            kube, "resourceclaims.resource.draco.dev", "example-resource-claim", namespace=namespace
        )
        assert shared is not None and k.allocation_node(shared) == node

        # A namespace that did not opt in: the same pod is admitted unchanged.
        untouched = _create(kube, _native_pod(other_namespace), lenient=True)
        if native_pods:
            assert untouched["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "some-claim"}]
        else:  # the server itself drops what its Pod API does not serve (docs/pods.md)
            assert "resourceClaims" not in untouched["spec"]
        assert not k.is_gated(untouched)
        assert CLAIMS_ANNOTATION not in (untouched["metadata"].get("annotations") or {})
        # In the opted-in namespace, a pod with nothing of draco's is untouched too.
        plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "plain-", "namespace": namespace},
                 "spec": {"containers": [{"name": "main", "image": "registry.invalid/none"}]}}  # fmt: skip
        assert not k.is_gated(_create(kube, plain))

        # An extended resource a DeviceClass backs is gated at admission (the webhook reads
        # the classes); one no class maps is not.
        resource = f"{namespace[:40]}.example.com/gpu"
        mapped = {**objects[0], "metadata": {"name": f"{namespace}-ext"[:63]},
                  "spec": {**objects[0]["spec"], "extendedResourceName": resource}}  # fmt: skip
        k.apply(kube, [mapped])
        upstream_name = f"deviceclass.resource.kubernetes.io/{mapped['metadata']['name']}"
        draco_name = f"deviceclass.resource.draco.dev/{mapped['metadata']['name']}"
        for limits, gated in (({resource: "1"}, True), ({upstream_name: "1"}, True), ({draco_name: "1"}, True),
                              ({"vendor.invalid/fpga": "1"}, False),
                              ({"deviceclass.resource.kubernetes.io/no-such-class": "1"}, False)):  # fmt: skip
            ext = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "ext-", "namespace": namespace},
                   "spec": {"containers": [{"name": "main", "image": "registry.invalid/none",
                                            "resources": {"limits": limits}}]}}  # fmt: skip
            assert k.is_gated(_create(kube, ext)) is gated
        # A class and its pod in one manifest, while the webhook's class list is fresh (the
        # pods above just read it): the pod asks for a name the list lacks, so the webhook
        # lists the classes again rather than wait out its cache, and gates it.
        second = f"{namespace[:40]}.example.com/fpga"
        together = [
            {**objects[0], "metadata": {"name": f"{namespace}-fpga"[:63]},
             "spec": {**objects[0]["spec"], "extendedResourceName": second}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "with-its-class", "namespace": namespace},
             "spec": {"containers": [{"name": "main", "image": "registry.invalid/none",
                                      "resources": {"limits": {second: "1"}}}]}},
        ]  # fmt: skip
        # A YAML stream of JSON documents: the leading separator keeps kubectl before 1.31
        # from reading the input as one JSON stream, where the next `---` is an error.
        out = kube.kubectl(
            "create", "-o", "json", "-f", "-", input="".join("---\n" + json.dumps(o) + "\n" for o in together)
        )
        decoder, text, created = json.JSONDecoder(), out.stdout.strip(), []
        while text:  # one JSON document per object created (or one List, as older kubectl prints)
            obj, end = decoder.raw_decode(text)
            created.extend(obj["items"] if obj.get("kind") == "List" else [obj])
            text = text[end:].strip()
        (pod,) = [o for o in created if o["kind"] == "Pod"]
        assert k.is_gated(pod)  # as admitted (the operator may have un-gated it since)

        # A bare pod of the native shape applied twice: the second `kubectl apply` brings
        # the translated native fields back, the webhook removes them again, nothing changes;
        # a real change of the pod's claims is refused by the API server as for any pod.
        bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": namespace},
                "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "example-resource-claim"}],
                         "containers": [{"name": "main", "image": "registry.invalid/none",
                                         "resources": {"claims": [{"name": "gpu"}]}}]}}  # fmt: skip
        first = kube.kubectl("apply", "-f", "-", input=json.dumps(shape(bare)))
        assert "pod/bare created" in first.stdout, first.stdout
        applied = k.get(kube, "pod", "bare", namespace=namespace)
        # Translated (the operator may have allocated and un-gated it already).
        assert applied is not None and "resourceClaims" not in applied["spec"]
        assert CLAIMS_ANNOTATION in applied["metadata"]["annotations"]
        for _ in range(2):
            again = kube.kubectl("apply", "-f", "-", input=json.dumps(shape(bare)), check=False)
            assert again.returncode == 0, again.stderr
            assert "Forbidden" not in again.stderr, again.stderr
        now = k.get(kube, "pod", "bare", namespace=namespace)
        assert now is not None and "resourceClaims" not in now["spec"]
        assert (
            now["metadata"]["annotations"][CLAIMS_ANNOTATION]
            == applied["metadata"]["annotations"][CLAIMS_ANNOTATION]
        )
        changed = json.loads(json.dumps(bare))
        changed["spec"]["resourceClaims"][0]["resourceClaimName"] = "another-claim"
        refused = kube.kubectl("apply", "-f", "-", input=json.dumps(shape(changed)), check=False)
        if native_pods:
            assert refused.returncode != 0 and "Forbidden" in refused.stderr, refused.stderr
        else:  # the server drops the field it does not serve: the claims do not change, kubectl warns
            assert refused.returncode == 0, refused.stderr
            assert "differ from the claims this pod was created with" in refused.stderr, refused.stderr
            kept = k.get(kube, "pod", "bare", namespace=namespace)
            assert kept is not None and "resourceClaims" not in kept["spec"]
            assert (
                kept["metadata"]["annotations"][CLAIMS_ANNOTATION]
                == applied["metadata"]["annotations"][CLAIMS_ANNOTATION]
            )

        # The webhook down (SIGKILL: its configurations stay). Where the namespace opted in,
        # a pod that could concern draco is refused with the API server's reason (admitted,
        # it would wait untranslated for ever): the Job's pod, a native pod; a plain pod is
        # not sent at all. Where it did not opt in, pods are created as written.
        webhook.process.kill()
        down = 'failed calling webhook "pods.translate.resource.draco.dev"'
        for refused_pod in (_pod_of_job(job), _native_pod(namespace)):
            refused = kube.kubectl(
                "create", "--validate=false", "-f", "-", input=json.dumps(refused_pod), check=False
            )
            assert refused.returncode != 0 and down in refused.stderr, refused.stderr
        assert not k.is_gated(
            _create(kube, {**plain, "metadata": {**plain["metadata"], "generateName": "plain-down-"}})
        )
        elsewhere = _create(kube, _native_pod(other_namespace), lenient=True)
        assert bool(elsewhere["spec"].get("resourceClaims")) == native_pods and not k.is_gated(elsewhere)
    # The webhook back: the Job controller's next try makes the pod, translated and gated,
    # as the first one was (and allocated, above).
    with running_webhook(kube, tmp_path / "webhook-again"):
        again = json.loads(kube.kubectl(
            "create", "--validate=false", "-o", "json", "-f", "-", input=json.dumps(_pod_of_job(job))).stdout)  # fmt: skip
        assert CLAIMS_ANNOTATION in (again["metadata"].get("annotations") or {}) and k.is_gated(again)
    if not native_pods:
        return  # nothing left on the pod to warn about: the server dropped it (docs/pods.md)
    # The operator serves the other namespace too: its untranslated pod gets a Warning
    # saying why and what to do.
    notes = wait_for(
        lambda: k.event_notes(
            kube, other_namespace, elsewhere["metadata"]["name"], "UntranslatedResourceClaims"
        ),
        timeout=60,
        what="a Warning Event on the untranslated pod",
    )
    assert isinstance(notes, list) and "is not labelled resource.draco.dev/pod-webhook=enabled" in notes[0], (
        notes
    )


def _deployment(namespace: str, template_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "native", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "native"}},
            "template": {
                "metadata": {"labels": {"app": "native"}},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
                    "containers": [{"name": "main", "image": "registry.invalid/none",
                                    "resources": {"claims": [{"name": "gpu"}]}}],
                },
            },
        },
    }  # fmt: skip


def test_a_deployments_template_is_translated_and_can_be_applied_again(
    kube: ControlPlane, namespace: str, other_namespace: str, tmp_path: Path
) -> None:
    """Before 1.34 without the DynamicResourceAllocation gate the API server drops
    `resourceClaims` from a stored pod template (shown in a namespace that did not opt in);
    in an opted-in one the workload webhook translates the template first, `kubectl apply`
    of the same manifest again changes nothing (no rollout), a changed claim rolls out."""
    kube.kubectl("label", "namespace", namespace, OPT_IN)
    with running_webhook(kube, tmp_path / "webhook"):
        native_templates = _keeps_pod_claims(kube, other_namespace)
        untouched = _create(kube, _deployment(other_namespace, "gpu"), lenient=True)
        assert bool(untouched["spec"]["template"]["spec"].get("resourceClaims")) == native_templates

        def apply(template_name: str) -> dict[str, Any]:
            manifest = _deployment(namespace, template_name)
            if not native_templates and kube.version().startswith("v1.30."):
                manifest["spec"]["template"] = _in_1_30_shape(manifest["spec"]["template"])
            done = kube.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
            assert done.returncode == 0 and "Forbidden" not in done.stderr, done.stderr
            stored = k.get(kube, "deployment", "native", namespace=namespace)
            assert stored is not None
            return stored

        first = apply("gpu")
        template = first["spec"]["template"]
        assert "resourceClaims" not in template["spec"]
        assert "claims" not in template["spec"]["containers"][0].get("resources", {})
        assert k.is_gated(template)
        (claim,) = parse_pod_claims(template)
        assert (claim.name, claim.resource_claim_template_name, claim.containers) == ("gpu", "gpu", ("main",))

        for _ in range(2):  # the same manifest again: the template does not change
            again = apply("gpu")
            assert again["metadata"]["generation"] == first["metadata"]["generation"]
            assert again["spec"]["template"] == template

        changed = apply("bigger-gpu")
        assert changed["metadata"]["generation"] == first["metadata"]["generation"] + 1
        (claim,) = parse_pod_claims(changed["spec"]["template"])
        assert claim.resource_claim_template_name == "bigger-gpu"
