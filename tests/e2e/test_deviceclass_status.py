"""DeviceClass status on a real API server, the operator running as a process.

What a user sees in `kubectl get deviceclasses.resource.draco.dev`: SELECTED (published
devices the class selects), ALLOCATED (those held by allocated claims) and VALID.

No admission webhook runs here (the operator serves none; `draco webhook` is not
started): it would refuse the broken selectors these tests create on purpose, and a class
stored before the webhook existed is exactly what the `Valid` condition is for. It serves every
namespace, because DeviceClass status describes the whole cluster (an operator limited
with `--namespace` leaves it alone).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.support import DracoProcess, start_operator

pytestmark = pytest.mark.e2e

Start = Callable[..., DracoProcess]


def device_class(name: str, *expressions: str) -> k.Obj:
    return {
        "apiVersion": k.API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def columns(kube: ControlPlane, name: str) -> dict[str, str]:
    """The row `kubectl get` prints for class `name`, by column header."""
    header, row = kube.kubectl("get", k.CLASSES, name).stdout.splitlines()[:2]
    # Columns are fixed-width and an unset one is blank, so cut the row at the headers.
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = [*starts[1:], len(row)]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, bounds, strict=True)}


def valid_condition(kube: ControlPlane, name: str) -> k.Obj | None:
    obj = k.get(kube, k.CLASSES, name)
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Valid":
            return dict(condition)
    return None


def wait_shows(
    kube: ControlPlane,
    name: str,
    *,
    selected: str,
    allocated: str,
    valid: str,
    what: str,
    timeout: float = 60,
) -> None:
    """Poll `kubectl get` until class `name` shows these SELECTED, ALLOCATED and VALID
    columns; on timeout fail with what it showed last and its Valid condition."""
    wanted = {"SELECTED": selected, "ALLOCATED": allocated, "VALID": valid}
    deadline = time.monotonic() + timeout
    while True:
        row = columns(kube, name)
        if all(row.get(column) == value for column, value in wanted.items()):
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout}s waiting for {what}: {row}, {valid_condition(kube, name)}"
            )
        time.sleep(0.2)


def test_counts_follow_slices_and_allocations(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    driver = k.driver_of(namespace)
    node_name = f"{namespace}-n0"
    class_name = f"{namespace}-gpu"
    k.add_nodes(kube, [k.node(node_name)])
    # Four devices published; the class takes those with index < 3.
    k.apply(
        kube,
        [
            device_class(
                class_name, f'device.driver == "{driver}"', f'device.attributes["{driver}"].index < 3'
            ),
            k.node_slice(namespace, node_name, 4),
        ],
    )
    operator = start_operator(draco_process)
    wait_shows(kube, class_name, selected="3", allocated="0", valid="True", what="the class counted")
    condition = valid_condition(kube, class_name)
    assert condition is not None
    assert condition["reason"] == "Valid"
    assert condition["observedGeneration"] == 1

    # A pod's claim of two devices from the class: allocated by the operator.
    k.apply(kube, [k.claim(namespace, "pair", count=2)])
    k.create(kube, [k.pod(namespace, "p", [{"name": "gpu", "resourceClaimName": "pair"}])])
    wait_shows(
        kube,
        class_name,
        selected="3",
        allocated="2",
        valid="True",
        what="two of the class's devices allocated",
    )

    # The node publishes a new generation with six devices in a new slice (index 0..5: the
    # class takes 3 of them still; the old generation's slice is left behind and no longer
    # counts); a second node's slice adds three more.
    more = k.node_slice(namespace, node_name, 6)
    more["metadata"]["name"] += "-g2"
    more["spec"]["pool"]["generation"] = 2
    other = f"{namespace}-n1"
    k.add_nodes(kube, [k.node(other)])
    k.apply(kube, [more, k.node_slice(namespace, other, 3)])
    wait_shows(
        kube,
        class_name,
        selected="6",
        allocated="2",
        valid="True",
        what="the newest generation and the second node's devices counted",
    )

    # Nothing changes any more: the status is not rewritten.
    version = (k.get(kube, k.CLASSES, class_name) or {})["metadata"]["resourceVersion"]
    time.sleep(3)
    assert (k.get(kube, k.CLASSES, class_name) or {})["metadata"]["resourceVersion"] == version

    # The class changes: the condition records the new generation.
    k.apply(kube, [device_class(class_name, f'device.driver == "{driver}"')])
    wait_shows(
        kube,
        class_name,
        selected="9",
        allocated="2",
        valid="True",
        what="the widened class counts every device of the driver",
    )
    condition = valid_condition(kube, class_name)
    assert condition is not None and condition["observedGeneration"] == 2

    # What changes while no operator runs is found at the next start: nothing lives only
    # in the operator's memory.
    operator.stop()
    kube.kubectl("delete", k.SLICES, f"{other}-{driver}")
    start_operator(draco_process)
    wait_shows(
        kube,
        class_name,
        selected="6",
        allocated="2",
        valid="True",
        what="the restarted operator counts what is published now",
    )


def test_broken_selectors_make_the_class_invalid(
    kube: ControlPlane, namespace: str, draco_process: Start
) -> None:
    driver = k.driver_of(namespace)
    node_name = f"{namespace}-n0"
    k.add_nodes(kube, [k.node(node_name)])
    slice_obj = k.node_slice(namespace, node_name, 3)
    # Only gpu-0 has a "model": a selector reading it fails at runtime on the others.
    slice_obj["spec"]["devices"][0]["attributes"]["model"] = {"string": "a100"}
    not_compiling = f"{namespace}-syntax"
    failing = f"{namespace}-runtime"
    k.apply(
        kube,
        [
            slice_obj,
            device_class(not_compiling, "device.driver =="),
            device_class(
                failing, f'device.driver == "{driver}"', f'device.attributes["{driver}"].model == "a100"'
            ),
        ],
    )
    start_operator(draco_process)

    wait_shows(
        kube,
        not_compiling,
        selected="0",
        allocated="0",
        valid="False",
        what="the class whose selector does not compile is invalid",
    )
    condition = valid_condition(kube, not_compiling)
    assert condition is not None
    assert condition["reason"] == "InvalidSelector"
    assert "spec.selectors[0].cel.expression" in condition["message"]

    wait_shows(
        kube,
        failing,
        selected="1",
        allocated="0",
        valid="False",
        what="the class whose selector fails at runtime is invalid and counts gpu-0 only",
    )
    condition = valid_condition(kube, failing)
    assert condition is not None
    assert condition["reason"] == "SelectorRuntimeError"
    assert "spec.selectors[1].cel.expression" in condition["message"]
    assert f"{driver}/{node_name}/gpu-1" in condition["message"]
    assert "and on 1 more device" in condition["message"]

    # Fixing the selector makes the class valid again.
    fixed = device_class(
        failing, f'device.driver == "{driver}"', f'device.attributes["{driver}"].?model.orValue("") == "a100"'
    )
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(fixed))
    wait_shows(kube, failing, selected="1", allocated="0", valid="True", what="the fixed class is valid")
