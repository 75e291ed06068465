"""`draco operator` itself serves the admission webhooks (no `--no-webhook`): a broken
DeviceClass is refused at `kubectl apply` with the selector and the compiler's error."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import yaml

from draco.tools.dev.controlplane import ControlPlane, free_port
from draco.webhook import MANAGED_CONFIGURATION_NAME
from tests.e2e.support import DracoProcess, wait_for

pytestmark = pytest.mark.e2e


def _class(name: str, expression: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
    )


@pytest.fixture
def operator_with_webhooks(
    kube: ControlPlane, draco_process: Callable[..., DracoProcess]
) -> Iterator[DracoProcess]:
    process = draco_process(
        "operator",
        "--metrics-port",
        "0",
        "--health-port",
        "0",
        "--webhook-port",
        str(free_port()),
        name="operator",
    )

    def refuses_broken_classes() -> bool:
        assert process.popen.poll() is None, process.logs()
        probe = kube.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=_class("probe", "device.driver =="), check=False
        )
        return "denied the request" in probe.stderr

    wait_for(refuses_broken_classes, timeout=90, what="the operator's webhook to answer kube-apiserver")
    try:
        yield process
    finally:
        process.stop()
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            kube.kubectl("delete", kind, MANAGED_CONFIGURATION_NAME, "--ignore-not-found", check=False)


def test_the_operator_rejects_a_broken_selector_and_accepts_a_valid_class(
    kube: ControlPlane, operator_with_webhooks: DracoProcess
) -> None:
    broken = kube.kubectl("apply", "-f", "-", input=_class("op-broken", "device.driver =="), check=False)
    assert broken.returncode != 0
    assert "spec.selectors[0].cel.expression: Invalid value" in broken.stderr
    assert "compilation failed" in broken.stderr
    fine = kube.kubectl(
        "apply", "-f", "-", input=_class("op-fine", 'device.driver == "gpu.example.com"'), check=False
    )
    assert fine.returncode == 0, fine.stderr
