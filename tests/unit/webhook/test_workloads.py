"""The workload webhook's patch: a template's native claims become its annotation and
gate, at the template's place in each kind; sent again unchanged they change nothing;
changed they replace the annotation's entry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.scheduling.podclaims import parse_pod_claims
from draco.webhook.workloads import WORKLOAD_KINDS, template_patch
from tests.unit.webhook.test_pods import _apply


def _template(*, metadata: bool = True, template_name: str = "gpu-template") -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": template_name},
                {"name": "shared", "resourceClaimName": "shared-gpu"},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {"claims": [{"name": "gpu"}, {"name": "shared"}]},
                },
                {
                    "name": "side",
                    "image": "x",
                    "resources": {"claims": [{"name": "shared", "request": "nic"}]},
                },
            ],
        }
    }
    if metadata:
        template["metadata"] = {"labels": {"app": "a"}}
    return template


def _workload(kind: str, template: dict[str, Any]) -> dict[str, Any]:
    if kind == "CronJob":
        spec: dict[str, Any] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    else:
        spec = {"template": template}
    return {"kind": kind, "metadata": {"name": "w"}, "spec": spec}


def _template_of(kind: str, workload: dict[str, Any]) -> dict[str, Any]:
    found: Any = workload
    for key in WORKLOAD_KINDS[kind]:
        found = found[key]
    assert isinstance(found, dict)
    return found


@pytest.mark.parametrize("kind", sorted(WORKLOAD_KINDS))
@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "no-metadata"])
def test_each_kinds_template_is_translated_and_gated(kind: str, metadata: bool) -> None:
    workload = _workload(kind, _template(metadata=metadata))
    ops, warnings = template_patch(kind, workload)
    assert not warnings
    translated = _apply(workload, ops)
    template = _template_of(kind, translated)
    assert "resourceClaims" not in template["spec"]
    assert all("claims" not in c["resources"] for c in template["spec"]["containers"])
    assert [g["name"] for g in template["spec"]["schedulingGates"]] == [SCHEDULING_GATE]
    claims = {c.name: c for c in parse_pod_claims(template)}
    assert claims["gpu"].resource_claim_template_name == "gpu-template"
    assert claims["gpu"].containers == ("main",)
    assert claims["shared"].resource_claim_name == "shared-gpu"
    assert claims["shared"].containers == ("main", "side")
    if metadata:
        assert template["metadata"]["labels"] == {"app": "a"}
    # Once translated, nothing is left to do.
    assert template_patch(kind, translated) == ([], [])


def test_sent_again_unchanged_the_template_stays_as_it_is() -> None:
    """`kubectl apply` of the same Deployment again brings the native fields back."""
    translated = _apply(_workload("Deployment", _template()), template_patch("Deployment", _workload("Deployment", _template()))[0])  # fmt: skip
    again = json.loads(json.dumps(translated))
    again["spec"]["template"]["spec"]["resourceClaims"] = _template()["spec"]["resourceClaims"]
    again["spec"]["template"]["spec"]["containers"] = _template()["spec"]["containers"]
    assert _apply(again, template_patch("Deployment", again)[0]) == translated


def test_a_changed_entry_replaces_the_annotations_entry_of_that_name() -> None:
    """A template's claims may change (a rollout); a pod's may not (there the annotation wins)."""
    translated = _apply(_workload("Deployment", _template()), template_patch("Deployment", _workload("Deployment", _template()))[0])  # fmt: skip
    changed = json.loads(json.dumps(translated))
    changed["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "bigger"}
    ]
    changed["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    template = _apply(changed, template_patch("Deployment", changed)[0])["spec"]["template"]
    claims = {c.name: c for c in parse_pod_claims(template)}
    assert claims["gpu"].resource_claim_template_name == "bigger"
    assert claims["shared"].resource_claim_name == "shared-gpu"  # untouched
    assert CLAIMS_ANNOTATION in template["metadata"]["annotations"]


def test_an_entry_naming_nothing_is_warned_about_at_the_templates_path() -> None:
    """Kubernetes 1.30 decodes today's shape into its own and loses the names."""
    template = {"spec": {"resourceClaims": [{"name": "gpu"}], "containers": [{"name": "main", "image": "x"}]}}
    ops, warnings = template_patch("CronJob", _workload("CronJob", template))
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "spec.jobTemplate.spec.template.spec.resourceClaims[0] (gpu): names neither"
    )
    assert not any(op["path"].endswith("/annotations") for op in ops)


def test_other_kinds_and_templates_without_claims_are_left_alone() -> None:
    assert template_patch("Pod", {"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "b"}]}}) == (
        [],
        [],
    )
    plain = _workload("Job", {"spec": {"containers": [{"name": "main", "image": "x"}]}})
    assert template_patch("Job", plain) == ([], [])
    assert template_patch("Job", {"kind": "Job", "spec": {}}) == ([], [])
