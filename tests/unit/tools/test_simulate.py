"""`draco simulate`: exit codes, output shape and explanations, on a multi-node fixture."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from draco.tools import simulate

DATA = Path(__file__).parents[1] / "data"
CLUSTER = str(DATA / "simulate-cluster.yaml")
CLAIM = str(DATA / "simulate-claim.yaml")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = simulate.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_allocates_on_the_first_node_that_fits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "-f", CLUSTER, "-f", CLAIM)
    assert code == 0, err
    document = yaml.safe_load(out)
    assert document["kind"] == "List"
    [item] = document["items"]
    assert item["metadata"] == {"name": "train", "namespace": "research"}
    allocation = item["status"]["allocation"]
    assert [(r["pool"], r["device"]) for r in allocation["devices"]["results"]] == [
        ("node-b", "gpu-0"),
        ("node-b", "gpu-2"),
    ]
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-b"]
    assert "allocated research/train on node node-b" in err


def test_explains_why_a_named_node_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "-f", CLUSTER, "-f", CLAIM, "--node", "node-c")
    assert code == 1
    assert out == ""
    assert "claim research/train cannot be allocated on node node-c" in err
    assert "1 tainted gpu.example.com/xid=79:NoExecute; 1 left" in err


def test_allocated_claims_count_as_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    # The fixture's serving/inference holds node-a/gpu-0; re-allocating it moves nothing.
    code, out, err = run(
        capsys, "-f", CLUSTER, "--claim", "serving/inference", "--node", "node-a", "-o", "json"
    )
    assert code == 0, err
    [item] = json.loads(out)["items"]
    assert item["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def test_no_node_fits_summarises(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    greedy = yaml.safe_load(Path(CLAIM).read_text())
    greedy["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    path = tmp_path / "greedy.yaml"
    path.write_text(yaml.safe_dump(greedy))
    code, _out, err = run(capsys, "-f", CLUSTER, "-f", str(path))
    assert code == 1
    assert "fit on none of 3 node(s)" in err
    assert "matchAttribute gpu.example.com/numa" in err


def test_reads_a_list_from_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    items = [*list(yaml.safe_load_all(Path(CLUSTER).read_text())), yaml.safe_load(Path(CLAIM).read_text())]
    monkeypatch.setattr(
        "sys.stdin", io.StringIO(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    )
    code, out, err = run(capsys, "-f", "-", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["items"][0]["status"]["allocation"]["devices"]["results"][0]["pool"] == "node-b"


def test_nodes_come_from_slices_without_node_objects(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    documents = [d for d in yaml.safe_load_all(Path(CLUSTER).read_text()) if d["kind"] != "Node"]
    path = tmp_path / "no-nodes.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    code, _, err = run(capsys, "-f", str(path), "-f", CLAIM)
    assert code == 0, err
    assert "on node node-b" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("kind: [", "not valid YAML"),
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: x, namespace: d}\n"
            "spec: {devices: {requests: [{name: r, exactly: {deviceClassName: tpu}}]}}\n",
            "device class tpu does not exist",
        ),
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {driver: 5}\n",
            "ResourceSlice s is invalid",
        ),
    ],
)
def test_invalid_input_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "-f", CLUSTER, "-f", str(path))
    assert code == 2
    assert out == ""
    assert message in err


def test_unknown_claim_and_missing_file_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "-f", CLUSTER, "--claim", "research/nope")
    assert code == 2
    assert "no ResourceClaim research/nope in the input" in err
    code, _, err = run(capsys, "-f", str(DATA / "does-not-exist.yaml"))
    assert code == 2
    assert "cannot read" in err


def test_nothing_to_allocate_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "-f", CLUSTER)
    assert code == 2
    assert "nothing to allocate" in err


def test_budget_exhaustion_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "-f", CLUSTER, "-f", CLAIM, "--node", "node-b", "--max-steps", "1")
    assert code == 3
    assert out == ""
    assert "search budget of 1 steps exhausted" in err


def test_dispatch_through_the_draco_command(capsys: pytest.CaptureFixture[str]) -> None:
    from draco import cli

    code = cli.main(["--log-format", "text", "simulate", "-f", CLUSTER, "-f", CLAIM, "-o", "json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"


EXAMPLES = Path(__file__).parents[3] / "examples"
DEMO_SLICES = str(DATA / "simulate-demo-slices.yaml")


def _kinds(path: Path) -> set[str]:
    return {
        str(document.get("kind"))
        for document in yaml.safe_load_all(path.read_text())
        if isinstance(document, dict) and str(document.get("apiVersion", "")).startswith("resource.")
    }


#: Upstream's manifest as the Kubernetes docs write it, for upstream's example driver
#: (`driver.example.com`), not the demo's fake devices; tests/e2e/test_pod_webhook.py runs it.
NOT_FOR_THE_DEMO = {
    "native-shape/job.yaml",
    # NVIDIA GPUs under --nvidia-compat; tests/unit/agent/test_nvidia_compat.py allocates them.
    *(f"nvidia/{name}" for name in ("deviceclasses.yaml", *(f"gpu-test{i}.yaml" for i in range(1, 5)))),
}


def _example_claim_files() -> list[Path]:
    return [
        path
        for path in sorted(EXAMPLES.rglob("*.yaml"))
        if "ResourceClaim" in _kinds(path) and str(path.relative_to(EXAMPLES)) not in NOT_FOR_THE_DEMO
    ]


@pytest.mark.parametrize("claims", _example_claim_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_claims_allocate_on_the_demo_inventory(
    capsys: pytest.CaptureFixture[str], claims: Path
) -> None:
    """Every example claim fits on what the demo's fake agent publishes."""
    classes = [
        path
        for path in sorted(EXAMPLES.rglob("*.yaml"))
        if "DeviceClass" in _kinds(path) and str(path.relative_to(EXAMPLES)) not in NOT_FOR_THE_DEMO
    ]
    files = {str(path) for path in classes} | {str(claims)}
    code, out, err = run(capsys, *(arg for path in sorted(files) for arg in ("-f", path)), "-f", DEMO_SLICES)
    assert code == 0, err
    for item in yaml.safe_load(out)["items"]:
        assert item["status"]["allocation"]["devices"]["results"]


TEMPLATE_AND_POD = """
apiVersion: resource.draco.dev/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: research}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu}}
---
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: research
  creationTimestamp: "2026-01-01T00:00:00Z"
  annotations:
    resource.draco.dev/claims: |
      - name: gpu
        resourceClaimTemplateName: one-gpu
spec:
  schedulingGates: [{name: resource.draco.dev/allocation}]
  containers: [{name: main, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata:
  name: native
  namespace: research
  creationTimestamp: "2026-01-01T00:00:01Z"
spec:
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: one-gpu}
  containers: [{name: main, image: busybox}]
"""


def test_a_template_and_pods_in_a_dump_allocate_pod_by_pod(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(TEMPLATE_AND_POD)
    code, out, err = run(capsys, "-f", CLUSTER, "-f", str(path))
    assert code == 0, err
    items = yaml.safe_load(out)["items"]
    # One generated claim per pod, named as the operator would, each on its own device.
    names = [item["metadata"]["name"] for item in items]
    assert [name.rsplit("-", 1)[0] for name in names] == ["trainer-gpu", "native-gpu"]
    assert all(
        item["metadata"]["annotations"]["resource.draco.dev/pod-claim-name"] == "gpu" for item in items
    )
    devices = {
        (r["pool"], r["device"]) for item in items for r in item["status"]["allocation"]["devices"]["results"]
    }
    assert len(devices) == 2
    assert err.count("allocated research/") == 2
    # The same input gives the same names (no random suffix).
    code, again, _ = run(capsys, "-f", CLUSTER, "-f", str(path))
    assert again == out


def test_one_pod_can_be_chosen(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(TEMPLATE_AND_POD)
    code, out, err = run(capsys, "-f", CLUSTER, "-f", str(path), "--pod", "research/native")
    assert code == 0, err
    [item] = yaml.safe_load(out)["items"]
    assert item["metadata"]["name"].startswith("native-gpu-")
    code, _, err = run(capsys, "-f", CLUSTER, "-f", str(path), "--pod", "research/nope")
    assert code == 2
    assert "no Pod research/nope in the input" in err


def test_a_broken_claim_does_not_fail_the_good_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = yaml.safe_load(Path(CLAIM).read_text())
    broken["metadata"]["name"] = "broken"
    broken["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "no-such-class"
    greedy = yaml.safe_load(Path(CLAIM).read_text())
    greedy["metadata"]["name"] = "greedy"
    greedy["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all([broken, greedy]))
    code, out, err = run(capsys, "-f", CLUSTER, "-f", CLAIM, "-f", str(path))
    # The good claim is allocated and printed; the broken one is invalid (2 wins over 1).
    assert code == 2
    assert [item["metadata"]["name"] for item in yaml.safe_load(out)["items"]] == ["train"]
    assert "allocated research/train on node node-b" in err
    assert "claim research/broken: invalid: " in err and "no-such-class" in err
    assert "claim research/greedy: does not fit:" in err
    code, _, err = run(capsys, "-f", CLUSTER, "-f", CLAIM, "-f", str(path), "--claim", "research/greedy")
    assert code == 1


def test_a_pod_whose_template_is_missing_is_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(TEMPLATE_AND_POD.split("---", 1)[1])
    code, out, err = run(capsys, "-f", CLUSTER, "-f", str(path))
    assert code == 2
    assert out == ""
    assert (
        "pod research/trainer: invalid: claim 'gpu': ResourceClaimTemplate research/one-gpu is not in the input"
        in err
    )


def test_a_folder_is_read_file_by_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(Path(CLUSTER).read_text())
    (tmp_path / "claim.yml").write_text(Path(CLAIM).read_text())
    (tmp_path / "notes.txt").write_text("not read")
    code, _, err = run(capsys, "-f", str(tmp_path))
    assert code == 0, err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "-f", str(empty))
    assert code == 2
    assert "a folder with no .yaml, .yml or .json files" in err


def test_non_utf8_input_exits_2_with_a_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("metadata: {name: caf\xe9}\n".encode("latin-1"))
    code, out, err = run(capsys, "-f", CLUSTER, "-f", str(path))
    assert code == 2
    assert out == ""
    assert "not UTF-8 text" in err and "Traceback" not in err


def test_fake_device_files_become_slices(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    devices = tmp_path / "devices.yaml"
    devices.write_text(
        "name: gpu.example.com\ndevices:\n- name: gpu-{index}\n  count: 2\n  attributes: {model: A100}\n"
    )
    claim = tmp_path / "claim.yaml"
    claim.write_text(
        "apiVersion: resource.draco.dev/v1\nkind: DeviceClass\nmetadata: {name: gpu}\n"
        "spec: {selectors: [{cel: {expression: 'device.driver == \"gpu.example.com\"'}}]}\n---\n"
        "apiVersion: resource.draco.dev/v1\nkind: ResourceClaim\nmetadata: {name: two, namespace: d}\n"
        "spec: {devices: {requests: [{name: r, exactly: {deviceClassName: gpu, count: 2}}]}}\n"
    )
    code, out, err = run(
        capsys, "-f", str(claim), "--fake-devices", str(devices), "--fake-node", "n1", "--fake-node", "n2"
    )
    assert code == 0, err
    [item] = yaml.safe_load(out)["items"]
    assert {r["pool"] for r in item["status"]["allocation"]["devices"]["results"]} == {"n1"}
    code, _, err = run(capsys, "--fake-devices", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert "cannot read" in err


def test_no_input_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2
    assert "give the input with -f PATH" in err
