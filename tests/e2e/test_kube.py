"""draco's one API client (`draco.kube`) against the real API server: errors map to the
right exceptions with status and reason, status writes are optimistic, apply, Events and
list-watch behave; an informer reports every change, deletions included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from draco.api.constants import API_VERSION
from draco.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from draco.kube import client as k
from draco.kube.capabilities import field_selector_served
from draco.kube.client import Kube, connect
from draco.kube.informer import Informer
from draco.kube.watch import list_watch
from draco.tools.dev.controlplane import ControlPlane
from tests.e2e.support import scaled, selectable_fields_served

pytestmark = pytest.mark.e2e

CONFIG_MAPS = k.Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)


def claim_body(name: str) -> k.Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }


@pytest.fixture
async def api(kube: ControlPlane) -> AsyncIterator[Kube]:
    client = await connect()
    yield client
    await client.close()


async def test_create_get_list_delete_and_their_errors(api: Kube, namespace: str) -> None:
    created = await api.create(k.RESOURCE_CLAIMS, claim_body("c1"), namespace=namespace)
    assert created["metadata"]["uid"]
    with pytest.raises(AlreadyExistsError):
        await api.create(k.RESOURCE_CLAIMS, claim_body("c1"), namespace=namespace)
    generated = await api.create(
        k.RESOURCE_CLAIMS, {**claim_body(""), "metadata": {"generateName": "gen-"}}, namespace=namespace
    )
    assert generated["metadata"]["name"].startswith("gen-")
    listed = await api.list(k.RESOURCE_CLAIMS, namespace=namespace)
    assert sorted(c["metadata"]["name"] for c in listed) == sorted(["c1", generated["metadata"]["name"]])
    assert all(c["kind"] == "ResourceClaim" and c["apiVersion"] == API_VERSION for c in listed)
    with pytest.raises(NotFoundError, match="missing"):
        await api.get(k.RESOURCE_CLAIMS, "missing", namespace=namespace)
    assert await api.get_or_none(k.RESOURCE_CLAIMS, "missing", namespace=namespace) is None
    with pytest.raises(ConflictError):
        await api.delete(k.RESOURCE_CLAIMS, "c1", namespace=namespace, uid="not-the-uid")
    assert await api.delete(k.RESOURCE_CLAIMS, "c1", namespace=namespace, uid=created["metadata"]["uid"])
    assert not await api.delete(k.RESOURCE_CLAIMS, "c1", namespace=namespace)


async def test_status_updates_fail_on_a_stale_resource_version(api: Kube, namespace: str) -> None:
    claim = await api.create(k.RESOURCE_CLAIMS, claim_body("c"), namespace=namespace)
    first = dict(claim)
    first["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "d.example.com", "pool": "p", "device": "x"}]
            }
        }
    }
    written = await api.replace_status(k.RESOURCE_CLAIMS, first)
    assert written["status"]["allocation"]
    stale = dict(claim)  # still carries the old resourceVersion
    stale["status"] = {}
    with pytest.raises(ConflictError):
        await api.replace_status(k.RESOURCE_CLAIMS, stale)
    again = await api.get(k.RESOURCE_CLAIMS, "c", namespace=namespace)
    assert again["status"]["allocation"], "the stale write changed nothing"


async def test_apply_owns_annotations_per_field_manager(
    api: Kube, kube: ControlPlane, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "annotations": {"user": "kept"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    await api.create(k.PODS, pod, namespace=namespace)
    body = {"metadata": {"name": "p", "namespace": namespace, "annotations": {"mine": "1"}}}
    await api.apply(k.PODS, body, field_manager="test-a")
    await api.apply(
        k.PODS,
        {"metadata": {"name": "p", "namespace": namespace, "annotations": {"theirs": "2"}}},
        field_manager="test-b",
    )
    body["metadata"]["annotations"] = {"mine": "3"}
    applied = await api.apply(k.PODS, body, field_manager="test-a")
    assert applied["metadata"]["annotations"] == {"user": "kept", "mine": "3", "theirs": "2"}


async def test_repeated_events_become_one_series(api: Kube, kube: ControlPlane, namespace: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    created = await api.create(k.PODS, pod, namespace=namespace)
    for _ in range(3):
        await api.emit_event(created, reason="Tested", message="same words", component="draco-test")
    await api.emit_event(
        created, reason="Tested", message="other words", type="Normal", component="draco-test"
    )
    events = json.loads(kube.kubectl("get", "events.v1.events.k8s.io", "-n", namespace, "-o", "json").stdout)[
        "items"
    ]
    mine = sorted((e for e in events if e["reason"] == "Tested"), key=lambda e: e["note"])
    assert [e["note"] for e in mine] == ["other words", "same words"]
    assert mine[1]["series"]["count"] == 3
    assert mine[1]["type"] == "Warning" and mine[0]["type"] == "Normal"
    assert mine[1]["regarding"]["uid"] == created["metadata"]["uid"]
    assert mine[1]["reportingController"] == "draco-test"
    described = kube.kubectl("describe", "pod", "p", "-n", namespace).stdout
    assert "same words" in described


async def test_errors_carry_status_and_reason(api: Kube, namespace: str) -> None:
    with pytest.raises(KubeError) as caught:
        await api.create(
            k.RESOURCE_CLAIMS, {"metadata": {"name": "Not_A_Name"}, "spec": {}}, namespace=namespace
        )
    assert caught.value.status == 422
    assert caught.value.reason == "Invalid"
    assert "Not_A_Name" in str(caught.value)
    with pytest.raises(NotFoundError) as missing:
        await api.get(k.RESOURCE_CLAIMS, "missing", namespace=namespace)
    assert (missing.value.status, missing.value.reason) == (404, "NotFound")


async def test_list_watch_follows_a_label_selector(api: Kube, namespace: str) -> None:
    """Objects that start matching arrive as ADDED, objects that stop matching as DELETED
    (what the agent's claim watch relies on)."""
    listed: list[list[k.Obj]] = []
    events: asyncio.Queue[tuple[str, str, dict[str, str]]] = asyncio.Queue()
    labelled = {**claim_body("before"), "metadata": {"name": "before", "labels": {"watch-test": namespace}}}
    await api.create(k.RESOURCE_CLAIMS, labelled, namespace=namespace)
    await api.create(k.RESOURCE_CLAIMS, claim_body("other"), namespace=namespace)

    was_listed = asyncio.Event()

    def on_list(items: list[k.Obj]) -> None:
        listed.append(items)
        was_listed.set()

    def on_event(kind: str, obj: k.Obj) -> None:
        events.put_nowait((kind, obj["metadata"]["name"], obj["metadata"].get("labels") or {}))

    task = asyncio.create_task(
        list_watch(
            api,
            k.RESOURCE_CLAIMS,
            namespace=namespace,
            label_selector=f"watch-test={namespace}",
            on_list=on_list,
            on_event=on_event,
        )
    )
    try:
        await asyncio.wait_for(was_listed.wait(), 30)
        await api.create(
            k.RESOURCE_CLAIMS,
            {**claim_body("after"), "metadata": {"name": "after", "labels": {"watch-test": namespace}}},
            namespace=namespace,
        )
        assert await asyncio.wait_for(events.get(), 30) == ("ADDED", "after", {"watch-test": namespace})
        assert [[o["metadata"]["name"] for o in items] for items in listed] == [["before"]]
        await api.patch(
            k.RESOURCE_CLAIMS,
            "other",
            {"metadata": {"labels": {"watch-test": namespace}}},
            namespace=namespace,
        )
        assert (await asyncio.wait_for(events.get(), 30))[:2] == ("ADDED", "other")
        await api.patch(k.RESOURCE_CLAIMS, "before", {"metadata": {"labels": None}}, namespace=namespace)
        kind, name, _labels = await asyncio.wait_for(events.get(), 30)
        assert (kind, name) == ("DELETED", "before")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_watch_from_a_compacted_version_is_gone(api: Kube, namespace: str) -> None:
    with pytest.raises(KubeError) as caught:
        async for _event in api.watch(k.RESOURCE_CLAIMS, resource_version="1", namespace=namespace):
            pass
    assert caught.value.status == 410


async def test_a_watch_the_server_refuses_raises_its_status(api: Kube, namespace: str) -> None:
    with pytest.raises(KubeError) as caught:
        async for _event in api.watch(
            k.RESOURCE_CLAIMS, resource_version="", namespace=namespace, field_selector="no.such.field=1"
        ):
            pass
    assert (caught.value.status, caught.value.reason) == (400, "BadRequest")
    assert "no.such.field" in str(caught.value)


async def test_the_field_selector_probe_agrees_with_the_crds_selectable_fields(
    api: Kube, kube: ControlPlane
) -> None:
    """The operator and the agent ask the server whether claims can be selected on
    ``status.nodeName``: yes exactly where the API server kept the CRD's selectableFields."""
    assert await field_selector_served(api, k.RESOURCE_CLAIMS, "status.nodeName") == (
        selectable_fields_served(kube)
    )
    assert not await field_selector_served(api, k.RESOURCE_CLAIMS, "spec.noSuchField")


async def test_a_body_orjson_refuses_is_sent_as_json_encodes_it(api: Kube, namespace: str) -> None:
    """Non-str keys (which orjson refuses) are encoded as `json` encodes them, as before."""
    body: k.Obj = {"metadata": {"name": "odd-keys"}, "data": {1: "one", "two": "2"}}
    await api.create(CONFIG_MAPS, body, namespace=namespace)
    got = await api.get(CONFIG_MAPS, "odd-keys", namespace=namespace)
    assert got["data"] == {"1": "one", "two": "2"}


async def test_the_token_refresh_hook_runs_before_every_request(
    api: Kube, kube: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A rotating service-account token (the in-cluster loader's refresh hook re-reads the
    mounted file) is what every call and watch sends: a request never goes out with the
    token the configuration was loaded with."""
    kube.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    kube.kubectl(
        "create", "role", "reader", "--verb=get,list,watch", "--resource=configmaps", "-n", namespace
    )
    kube.kubectl(
        "create",
        "rolebinding",
        "reader",
        "--role=reader",
        f"--serviceaccount={namespace}:reader",
        "-n",
        namespace,
    )
    token_file = tmp_path / "token"
    token_file.write_text(kube.kubectl("create", "token", "reader", "-n", namespace).stdout.strip())
    refreshes = 0

    async def refresh(configuration: client.Configuration) -> None:
        nonlocal refreshes
        refreshes += 1
        configuration.api_key["BearerToken"] = f"Bearer {token_file.read_text()}"

    assert kube.certs is not None
    configuration = client.Configuration(host=kube.server, api_key={"BearerToken": "Bearer not-a-token"})
    configuration.ssl_ca_cert = str(kube.certs.ca_cert)
    configuration.refresh_api_key_hook = refresh
    reader = Kube(client.ApiClient(configuration))
    try:
        await api.create(CONFIG_MAPS, {"metadata": {"name": "a"}}, namespace=namespace)
        assert (await reader.get(CONFIG_MAPS, "a", namespace=namespace))["metadata"]["name"] == "a"
        _items, version = await reader.list_with_version(CONFIG_MAPS, namespace=namespace)
        await api.create(CONFIG_MAPS, {"metadata": {"name": "b"}}, namespace=namespace)
        async for event in reader.watch(CONFIG_MAPS, resource_version=version, namespace=namespace):
            assert (event.type, event.object["metadata"]["name"]) == ("ADDED", "b")
            break
        assert refreshes == 3

        token_file.write_text("revoked")
        with pytest.raises(KubeError) as refused:
            await reader.get(CONFIG_MAPS, "a", namespace=namespace)
        assert (refused.value.status, refused.value.reason) == (401, "Unauthorized")
        with pytest.raises(KubeError) as refused_watch:
            async for _event in reader.watch(CONFIG_MAPS, resource_version=version, namespace=namespace):
                pass
        assert refused_watch.value.status == 401
    finally:
        await reader.close()


async def test_an_informer_lists_then_reports_every_change_deletions_included(
    api: Kube, namespace: str
) -> None:
    for name in ("a", "b"):
        await api.create(k.RESOURCE_CLAIMS, claim_body(name), namespace=namespace)
    informer = Informer(api, k.RESOURCE_CLAIMS, scopes=(namespace,))
    seen: list[tuple[str, str]] = []
    informer.subscribe(lambda type_, obj: seen.append((type_, obj["metadata"]["name"])))
    await informer.start()
    try:
        assert sorted(seen) == [("ADDED", "a"), ("ADDED", "b")]
        assert await api.delete(k.RESOURCE_CLAIMS, "a", namespace=namespace)
        await api.create(k.RESOURCE_CLAIMS, claim_body("c"), namespace=namespace)
        deadline = asyncio.get_running_loop().time() + scaled(30)
        while ("ADDED", "c") not in seen:
            assert asyncio.get_running_loop().time() < deadline, f"no events after the LIST: {seen}"
            await asyncio.sleep(0.1)
        assert seen[2:] == [("DELETED", "a"), ("ADDED", "c")]
        assert sorted(o["metadata"]["name"] for o in informer.values()) == ["b", "c"]
    finally:
        await informer.stop()
