"""The admission server in-process (plain HTTP through aiohttp's test client; TLS is
exercised end to end in tests/e2e), answering through Kopf's admission machinery with
draco's handlers: AdmissionReview in and out, the body limit, metrics, and a slow
selector that must not hold up the loop."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest

from draco.runtime.metrics import REGISTRY
from draco.runtime.tls import ReloadingServerContext, write_webhook_certificates
from draco.tools.dev.controlplane import free_port
from draco.webhook.app import MAX_REQUEST_BYTES, WebhookServer
from tests.unit.webhook.kopfkit import PLURALS, admission_fn

V = "resource.draco.dev/v1"


def _review(obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None,
            uid: str = "0f1e2d3c") -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "resource.draco.dev", "version": "v1", "kind": obj["kind"]},
            "resource": {"group": "resource.draco.dev", "version": "v1", "resource": PLURALS[obj["kind"]]},
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": old,
        },
    }


def _class(*expressions: str, name: str = "gpu") -> dict[str, Any]:
    return {
        "apiVersion": V,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    certs = write_webhook_certificates(["127.0.0.1"], directory=tmp_path)
    server = WebhookServer(tls=ReloadingServerContext(cert_file=certs.cert_file, key_file=certs.key_file))
    server.answer_with(admission_fn())
    async with TestClient(TestServer(server.application())) as test_client:
        yield test_client


async def test_a_broken_selector_is_denied_with_the_api_servers_wording(client: TestClient[Any, Any]) -> None:
    response = await client.post("/validate", json=_review(_class("device.driver =="), uid="abc"))
    assert response.status == 200
    answer = (await response.json())["response"]
    assert answer["uid"] == "abc"
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    assert answer["status"]["message"].startswith(
        "DeviceClass gpu is invalid: spec.selectors[0].cel.expression: Invalid value"
    )
    assert answer["status"]["reason"] == "Invalid"
    fine = await client.post("/validate", json=_review(_class('device.driver == "gpu.example.com"')))
    assert (await fine.json())["response"] == {"uid": "0f1e2d3c", "allowed": True}


async def test_defaults_come_back_as_a_json_patch(client: TestClient[Any, Any]) -> None:
    claim = {
        "apiVersion": V,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    answer = (await (await client.post("/mutate", json=_review(claim))).json())["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(answer["patch"]))
    assert {op["path"].split("/")[1] for op in operations} == {"spec"}
    exactly = jsonpatch.apply_patch(claim, operations)["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly["allocationMode"], exactly["count"]) == ("ExactCount", 1)
    # An update of the (immutable) spec changes nothing: no patch at all.
    again = await client.post("/mutate", json=_review(claim, operation="UPDATE", old=claim))
    assert "patch" not in (await again.json())["response"]


async def test_updates_of_objects_near_the_api_servers_limit_are_read(client: TestClient[Any, Any]) -> None:
    # Two objects of ~2.5 MiB each (the API server takes request bodies up to 3 MiB): well
    # over aiohttp's default 1 MiB, and what an update of a large ResourceSlice carries.
    big = _class('device.driver == "gpu.example.com"')
    big["metadata"]["annotations"] = {"example.com/blob": "x" * (5 * 1024 * 1024 // 2)}
    review = _review(big, operation="UPDATE", old=big)
    assert 5 * 1024 * 1024 < len(json.dumps(review)) < MAX_REQUEST_BYTES
    response = await client.post("/validate", json=review)
    assert response.status == 200
    answer = (await response.json())["response"]
    assert answer["allowed"] is False  # annotations over 256 KiB: refused with a verdict, not a 413
    assert "metadata.annotations: Too long" in answer["status"]["message"]
    too_big = await client.post("/validate", data=b"x" * (MAX_REQUEST_BYTES + 1))
    assert too_big.status == 413


async def test_what_is_not_an_admission_review_is_a_bad_request(client: TestClient[Any, Any]) -> None:
    assert (await client.post("/validate", data=b"{}")).status == 400
    assert (await client.post("/mutate", data=b"not json")).status == 400
    # A review of a DELETE (never registered) carries no object: malformed, not a 500.
    deletion = _review(_class('device.driver == "gpu.example.com"'), operation="DELETE")
    deletion["request"]["object"] = None
    response = await client.post("/validate", json=deletion)
    assert response.status == 400
    assert "carries no object" in (await response.json())["error"]


async def _wait_until_in_flight(client: TestClient[Any, Any]) -> None:
    """Poll /metrics until one validation is being answered (the metric says so)."""
    for _ in range(3000):
        metrics = generate_latest(REGISTRY).decode()
        if 'draco_webhook_requests_in_flight{webhook="validate"} 1.0' in metrics:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the slow validation never showed as in flight")


async def test_a_slow_selector_does_not_hold_up_probes_or_other_reviews(
    client: TestClient[Any, Any],
) -> None:
    # Eight selectors of 10,000 negations each (valid: a run of `!` is one node, as in
    # cel-go): seconds of parsing, in a thread. (Deeply nested parentheses no longer do:
    # past cel-go's nesting limit they are rejected before parsing.)
    deep = "!" * 10000 + "true"
    slow = asyncio.create_task(client.post("/validate", json=_review(_class(*[deep] * 8, name="deep"))))
    await _wait_until_in_flight(client)
    assert (await client.get("/healthz")).status == 200
    other = await client.post("/validate", json=_review(_class("device.driver ==", name="other")))
    assert (await other.json())["response"]["allowed"] is False
    assert not slow.done(), "the deep selector finished before the probe: the test proves nothing"
    assert (await (await slow).json())["response"]["uid"] == "0f1e2d3c"


async def test_requests_are_counted_by_kind_operation_and_verdict(client: TestClient[Any, Any]) -> None:
    await client.post(
        "/validate", json=_review(_class("device.driver =="), operation="UPDATE", old=_class("true"))
    )
    text = generate_latest(REGISTRY).decode()
    assert (
        'draco_webhook_requests_total{kind="DeviceClass",operation="UPDATE",verdict="denied",webhook="validate"}'
        in text
    )
    assert "draco_webhook_request_duration_seconds_bucket" in text


async def _handshake_ok(port: int, ca_file: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except ssl.SSLError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def test_the_server_follows_its_certificate_files(tmp_path: Path) -> None:
    live = tmp_path / "live"
    first = write_webhook_certificates(["127.0.0.1"], directory=live)
    first_ca = tmp_path / "first-ca.crt"
    first_ca.write_bytes(first.ca_file.read_bytes())
    server = WebhookServer(
        tls=ReloadingServerContext(cert_file=first.cert_file, key_file=first.key_file),
        listen_address="127.0.0.1",
        port=free_port(),
        reload_interval=0.05,
    )
    await server.start()
    try:
        assert server.health.ready
        assert await _handshake_ok(server.port, first_ca)
        # Rotated in place (a new CA too): new handshakes present the new certificate.
        second = write_webhook_certificates(["127.0.0.1"], directory=live)
        for _ in range(600):
            if await _handshake_ok(server.port, second.ca_file):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the server never presented the rotated certificate")
        assert not await _handshake_ok(server.port, first_ca)
        assert server.tls.reloads == 1
    finally:
        await server.stop()


def _structured(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """draco's own log entries (structlog's, each record's message its event dict) with
    their level. Read from the stdlib records draco's loggers end in, not with
    `structlog.testing.capture_logs`: that misses a logger cached before it (draco caches
    loggers on first use), so the test failed whenever another test had logged first."""
    return [
        {**record.msg, "log_level": record.levelname.lower()}
        for record in caplog.records
        if isinstance(record.msg, dict)
    ]


async def test_a_denial_is_logged_at_info_and_a_fault_at_error(
    client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A user's invalid object is the user's mistake, not the server's: never `error`.
    with caplog.at_level(logging.INFO, logger="draco"):
        response = await client.post("/validate", json=_review(_class("device.driver ==")))
        assert (await response.json())["response"]["allowed"] is False
    logs = _structured(caplog)
    denials = [entry for entry in logs if entry["event"] == "Rejected a write"]
    assert [entry["log_level"] for entry in denials] == ["info"]
    assert denials[0]["user"] == "alice" and "spec.selectors[0].cel.expression" in denials[0]["message"]
    assert not [entry for entry in logs if entry["log_level"] in ("error", "critical")]

    async def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("bug")

    # Kopf answers a handler's unexpected error as a denial; the server makes it a 500 so
    # that the API server applies the webhook's failurePolicy.
    monkeypatch.setattr("draco.webhook.handlers.admission_verdict", broken)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="draco"):
        response = await client.post("/validate", json=_review(_class("device.driver ==")))
        assert response.status == 500
    failed = [e["log_level"] for e in _structured(caplog) if e["event"] == "Admission request failed"]
    assert failed == ["error"]


async def test_the_admission_port_serves_no_metrics(client: TestClient[Any, Any]) -> None:
    # Anyone who reaches the admission port may call it: metrics are on --metrics-port,
    # behind the API server's authorization (draco.runtime.metricsserver).
    assert (await client.get("/metrics")).status in (404, 405)
