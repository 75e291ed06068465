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
    assert "already allocated" in err


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


def _example_claim_files() -> list[Path]:
    return [path for path in sorted(EXAMPLES.rglob("*.yaml")) if "ResourceClaim" in _kinds(path)]


@pytest.mark.parametrize("claims", _example_claim_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_claims_allocate_on_the_demo_inventory(
    capsys: pytest.CaptureFixture[str], claims: Path
) -> None:
    """Every example claim fits on what the demo's fake agent publishes."""
    classes = [path for path in sorted(EXAMPLES.rglob("*.yaml")) if "DeviceClass" in _kinds(path)]
    files = {str(path) for path in classes} | {str(claims)}
    code, out, err = run(capsys, *(arg for path in sorted(files) for arg in ("-f", path)), "-f", DEMO_SLICES)
    assert code == 0, err
    for item in yaml.safe_load(out)["items"]:
        assert item["status"]["allocation"]["devices"]["results"]
