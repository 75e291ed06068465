"""The webhook configurations: who is routed where, with which failure policy. (That the
chart installs what `--print-configuration` prints is checked in tests/e2e/test_chart.py,
where helm is at hand.)"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from draco.webhook.cli import main
from draco.webhook.configuration import Endpoint, webhook_configurations

ROOT = Path(__file__).resolve().parents[3]
OPERATOR = "system:serviceaccount:draco-system:draco-operator"


def _by_name(configuration: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in configuration["webhooks"]}


def test_user_writes_fail_closed_and_system_writes_fail_open() -> None:
    validating, mutating = webhook_configurations(
        Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM"), exempt_users=(OPERATOR,)
    )
    hooks = {**_by_name(validating), **_by_name(mutating)}
    user = hooks["user.validate.resource.draco.dev"]
    system = hooks["system.validate.resource.draco.dev"]
    assert user["failurePolicy"] == "Fail" and system["failurePolicy"] == "Ignore"
    assert set(user["rules"][0]["resources"]) == {
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "devicetaintrules",
    }
    system_resources = {r for rule in system["rules"] for r in rule["resources"]}
    assert system_resources == {
        "resourceslices",
        "resourceclaims/status",
        "devicetaintrules/status",
        "resourcepoolstatusrequests/status",
    }
    # A pool status request is a user's write, its answer the operator's.
    assert {"resourcepoolstatusrequests"} in [set(rule["resources"]) for rule in user["rules"]]
    # The agent's and the operator's own writes never wait on a Fail-policy webhook.
    assert hooks["system.default.resource.draco.dev"]["failurePolicy"] == "Ignore"
    assert hooks["system.default.resource.draco.dev"]["rules"][0]["resources"] == ["resourceslices"]
    assert all(h["timeoutSeconds"] <= 10 and h["sideEffects"] == "None" for h in hooks.values())
    assert user["clientConfig"] == {"url": "https://127.0.0.1:9443/validate", "caBundle": "UEVN"}
    assert hooks["user.default.resource.draco.dev"]["clientConfig"]["url"].endswith("/mutate")
    (condition,) = user["matchConditions"]
    assert condition["expression"] == f"!(request.userInfo.username in ['{OPERATOR}'])"
    assert "matchConditions" not in system


def test_the_exempt_users_claims_are_only_charged_to_quota_failing_open() -> None:
    validating, _ = webhook_configurations(
        Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM"), exempt_users=(OPERATOR,)
    )
    quota = _by_name(validating)["quota.validate.resource.draco.dev"]
    assert quota["failurePolicy"] == "Ignore"
    assert quota["rules"][0]["resources"] == ["resourceclaims"] and quota["rules"][0]["operations"] == [
        "CREATE"
    ]
    assert quota["clientConfig"]["url"].endswith("/validate-quota")
    (condition,) = quota["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username in ['{OPERATOR}']"
    # Without exempt users every claim goes through user.validate, which charges it there.
    (plain, _) = webhook_configurations(Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM"))
    assert "quota.validate.resource.draco.dev" not in _by_name(plain)


def test_a_service_reference_and_cert_manager_injection() -> None:
    (validating, _) = webhook_configurations(
        Endpoint(service=("draco-system", "draco-webhook"), inject_ca_from="draco-system/draco-webhook")
    )
    assert validating["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "draco-system/draco-webhook"
    }
    config = validating["webhooks"][0]["clientConfig"]
    assert config == {
        "service": {"namespace": "draco-system", "name": "draco-webhook", "path": "/validate", "port": 443}
    }


def test_print_configuration_with_a_url_embeds_the_ca_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    main(["--print-configuration", "--url", "https://10.0.0.1:9443", "--ca-file", str(ca)])
    validating, _ = yaml.safe_load_all(capsys.readouterr().out)
    bundle = validating["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(bundle) == ca.read_bytes()
    with pytest.raises(SystemExit, match="--service NS/NAME and --url URL"):
        main(["--print-configuration", "--ca-file", str(ca)])
    with pytest.raises(SystemExit, match="https://"):
        main(["--print-configuration", "--url", "http://10.0.0.1", "--ca-file", str(ca)])


def test_pod_webhooks_fail_closed_in_the_opted_in_namespaces_they_see_by_default() -> None:
    (_, mutating) = webhook_configurations(Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM"))
    hooks = _by_name(mutating)
    pods = hooks["pods.translate.resource.draco.dev"]
    assert "pods.gate.resource.draco.dev" not in hooks
    # Down, it refuses such pods there: never admitted untranslated to wait for ever.
    assert pods["failurePolicy"] == "Fail"
    # UPDATE too, but only those that bring translated native claims back (kubectl apply again).
    assert pods["rules"][0]["resources"] == ["pods"] and pods["rules"][0]["operations"] == [
        "CREATE",
        "UPDATE",
    ]
    assert pods["namespaceSelector"]["matchExpressions"] == [
        {"key": "resource.draco.dev/pod-webhook", "operator": "In", "values": ["enabled"]}
    ]
    assert pods["clientConfig"]["url"].endswith("/mutate-pods/translate")
    assert "resource.draco.dev/claims" in pods["matchConditions"][0]["expression"]
    assert pods["matchConditions"][1] == {
        "name": "created-or-native-claims-reapplied",
        "expression": "request.operation == 'CREATE' || "
        "(has(object.spec.resourceClaims) && !has(oldObject.spec.resourceClaims))",
    }


def test_pod_webhook_modes() -> None:
    endpoint = Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM")
    (_, everywhere) = webhook_configurations(endpoint, pod_webhook="all", translate_native="off")
    hooks = _by_name(everywhere)
    assert hooks["pods.translate.resource.draco.dev"]["clientConfig"]["url"].endswith("/mutate-pods")
    # Without translation there is nothing to re-apply: CREATE only.
    assert hooks["pods.translate.resource.draco.dev"]["rules"][0]["operations"] == ["CREATE"]
    assert len(hooks["pods.translate.resource.draco.dev"]["matchConditions"]) == 1
    gate = hooks["pods.gate.resource.draco.dev"]
    assert gate["rules"][0]["operations"] == ["CREATE"]
    # Namespaces that did not opt in are never blocked by a down webhook.
    assert gate["failurePolicy"] == "Ignore"
    assert hooks["pods.translate.resource.draco.dev"]["failurePolicy"] == "Fail"
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in gate[
        "namespaceSelector"
    ]["matchExpressions"]
    (_, none) = webhook_configurations(endpoint, pod_webhook="off")
    assert not any(name.startswith("pods.") for name in _by_name(none))


def test_the_workload_webhook_translates_templates_where_pods_are_translated() -> None:
    endpoint = Endpoint(url="https://127.0.0.1:9443", ca_bundle=b"PEM")
    (_, mutating) = webhook_configurations(endpoint)
    workloads = _by_name(mutating)["workloads.translate.resource.draco.dev"]
    assert workloads["failurePolicy"] == "Fail"
    assert workloads["clientConfig"]["url"].endswith("/mutate-workloads")
    assert {(g, r) for rule in workloads["rules"] for g in rule["apiGroups"] for r in rule["resources"]} == {
        ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"), ("apps", "daemonsets"),
        ("batch", "jobs"), ("batch", "cronjobs"),
    }  # fmt: skip
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in workloads["rules"])
    assert (
        workloads["namespaceSelector"]
        == _by_name(mutating)["pods.translate.resource.draco.dev"]["namespaceSelector"]
    )
    assert (
        "object.spec.jobTemplate.spec.template.spec.resourceClaims"
        in workloads["matchConditions"][0]["expression"]
    )
    # Nowhere else: without translation (native DRA serves pods) or without the pod webhook.
    for kwargs in (
        {"translate_native": "off"},
        {"pod_webhook": "off"},
        {"pod_webhook": "all", "translate_native": "off"},
    ):
        (_, other) = webhook_configurations(endpoint, **kwargs)  # type: ignore[arg-type]
        assert "workloads.translate.resource.draco.dev" not in _by_name(other)
