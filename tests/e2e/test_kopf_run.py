"""`kopf run -m draco.operator` runs the operator: Kopf's own command, with the module's
handlers (its startup handler builds the operator, whose controllers are Kopf event
handlers), allocates a gated pod's claim from its template and un-gates the pod, as
`draco operator` does with its default options (one replica, no Lease)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import wait_for

pytestmark = pytest.mark.e2e


def test_kopf_run_of_the_operator_module_allocates_a_gated_pod(
    kube: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    node = f"{namespace}-n0"
    k.add_nodes(kube, [k.node(node)])
    k.apply(kube, [k.device_class(namespace), k.node_slice(namespace, node, 1), k.template(namespace, "one")])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimTemplateName": "one"}])])
    log = tmp_path / "kopf-run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "--all-namespaces", "-m", "draco.operator"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=kube.env(),
            start_new_session=True,
        )
    try:
        pod = wait_for(
            lambda: (p := k.get(kube, "pod", "p", namespace=namespace)) and not k.is_gated(p) and p,
            timeout=90,
            what="the pod un-gated by the operator kopf runs",
            explain=lambda: log.read_text(errors="replace")[-4000:],
        )
        assert isinstance(pod, dict) and k.pinned_node(pod) == node
        (name,) = k.generated_claims(pod).values()
        claim = k.get(kube, k.CLAIMS, str(name), namespace=namespace)
        assert claim is not None and k.allocation_node(claim) == node
        assert process.poll() is None, log.read_text(errors="replace")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    assert process.returncode == 0, log.read_text(errors="replace")[-4000:]
