"""`draco simulate` explains a group of pods as the operator decides it: placed whole, or
how many fit, how many are needed and why each other member does not; topology domains
best fit first; a claim of the group made once and shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.tools.test_simulate_rules import ANTI, cluster, node, pod, run

Obj = dict[str, Any]


def group(name: str, min_count: int, **spec: Any) -> Obj:
    return {
        "apiVersion": "scheduling.draco.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def member(name: str, group_name: str, **kwargs: Any) -> Obj:
    labels = {"scheduling.draco.dev/pod-group": group_name, **kwargs.pop("labels", {})}
    return pod(name, labels=labels, **kwargs)


def test_a_group_that_fits_is_placed_whole(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pods = [member(f"w{i}", "train", created=i) for i in range(4)]
    code, items, err = run(capsys, tmp_path, cluster(group("train", 4), *pods))
    assert code == 0, err
    assert "group default/train: 4 pod(s) placed together" in err
    assert len(items) == 4


def test_a_group_that_does_not_fit_says_how_many_fit_and_why_the_others_do_not(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Three nodes of two GPUs, and every member must be on a node of its own (anti-affinity).
    pods = [member(f"w{i}", "train", created=i, labels={"app": "web"}, affinity=ANTI) for i in range(4)]
    code, items, err = run(capsys, tmp_path, cluster(group("train", 4), *pods))
    assert code == 1
    assert items == [], "nothing is allocated for a group that does not fit whole"
    assert "3 of 4 pod(s) can be placed together, 4 needed" in err
    assert "- default/w3: 0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules." in err


def test_a_pod_outside_the_group_is_placed_while_the_group_waits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pods = [member(f"w{i}", "big", created=i) for i in range(7)]
    code, items, err = run(capsys, tmp_path, cluster(group("big", 7), *pods, pod("solo", created=9)))
    assert code == 1
    assert "6 of 7 pod(s) can be placed together" in err
    assert [item["metadata"]["name"].rsplit("-", 2)[0] for item in items] == ["solo"]


def test_the_group_lands_in_the_domain_where_it_fits_best(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b")]
    pods = [member(f"w{i}", "train", created=i) for i in range(2)]
    constraints = {"topology": [{"key": "topology.kubernetes.io/zone"}]}
    documents = cluster(group("train", 2, schedulingConstraints=constraints), *pods, nodes=nodes)
    code, _, err = run(capsys, tmp_path, documents)
    assert code == 0, err
    # Zone b holds exactly two GPUs: the tightest fit, zone a's four are left whole.
    assert "in topology.kubernetes.io/zone=b" in err


def test_a_claim_of_the_group_is_made_once_for_all_its_members(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pods = [member(f"w{i}", "shared", created=i) for i in range(3)]
    code, items, err = run(capsys, tmp_path, cluster(group("shared", 3, resourceClaims=claims), *pods))
    assert code == 0, err
    assert [item["metadata"]["name"].rsplit("-", 1)[0] for item in items] == ["shared-gpu"]


def test_a_group_whose_object_is_missing_waits_for_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, items, err = run(capsys, tmp_path, cluster(member("w0", "nowhere")))
    assert code == 1 and items == []
    assert "PodGroup default/nowhere does not exist" in err
