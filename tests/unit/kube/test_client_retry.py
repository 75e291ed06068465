"""A request the API server answers with "come back later" (429 or 5xx with `Retry-After`)
is sent again, as client-go's REST client does; any other refusal is raised at once.

kube-apiserver 1.31 to 1.33 answer a list 429 "storage is (re)initializing" for a few
moments after a CRD changed (its watch cache starts again), and no real server can be made
to do that on cue: a small HTTP server in the test answers what it does, byte for byte.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from draco.errors import KubeError
from draco.kube.client import RESOURCE_CLAIMS, Kube

#: What kube-apiserver 1.33 sends while a CRD's storage starts again.
REINITIALIZING = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "storage is (re)initializing",
    "reason": "TooManyRequests",
    "details": {"retryAfterSeconds": 1},
    "code": 429,
}
EMPTY_LIST = {"kind": "ResourceClaimList", "apiVersion": "resource.draco.dev/v1", "metadata": {}, "items": []}

Answer = Callable[[int], web.Response]


def refused(status: int = 429, *, retry_after: str | None = "0") -> web.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return web.Response(
        status=status, body=orjson.dumps({**REINITIALIZING, "code": status}), headers=headers,
        content_type="application/json",
    )  # fmt: skip


class Server:
    """Answers the n-th request (from 0) with `answer(n)`; remembers each request's method."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.methods: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.methods.append(request.method)
        return self.answer(len(self.methods) - 1)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Answer], Any]]:
    started: list[tuple[TestServer, Kube]] = []

    async def start(answer: Answer) -> tuple[Server, Kube]:
        server = Server(answer)
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", server.handle)
        test_server = TestServer(app)
        await test_server.start_server()
        configuration = client.Configuration()
        configuration.host = str(test_server.make_url("")).rstrip("/")
        kube = Kube(client.ApiClient(configuration))
        started.append((test_server, kube))
        return server, kube

    yield start
    for test_server, kube in started:
        await kube.close()
        await test_server.close()


async def test_a_list_refused_while_storage_reinitializes_is_sent_again(serve: Any) -> None:
    server, kube = await serve(lambda n: refused() if n < 2 else web.json_response(EMPTY_LIST))
    assert await kube.list(RESOURCE_CLAIMS, field_selector="status.nodeName=x") == []
    assert server.methods == ["GET", "GET", "GET"]


async def test_a_write_refused_with_retry_after_is_sent_again(serve: Any) -> None:
    claim = {"metadata": {"name": "c", "namespace": "ns"}, "spec": {}}
    server, kube = await serve(lambda n: refused(503) if n < 1 else web.json_response(claim, status=201))
    assert (await kube.create(RESOURCE_CLAIMS, claim))["metadata"]["name"] == "c"
    assert server.methods == ["POST", "POST"]


async def test_refusals_without_retry_after_are_raised_at_once(serve: Any) -> None:
    server, kube = await serve(lambda n: refused(429, retry_after=None))
    with pytest.raises(KubeError) as caught:
        await kube.list(RESOURCE_CLAIMS)
    assert caught.value.status == 429
    assert "storage is (re)initializing" in str(caught.value)
    assert server.methods == ["GET"]


async def test_a_client_error_is_never_retried(serve: Any) -> None:
    server, kube = await serve(lambda n: refused(400, retry_after="0"))
    with pytest.raises(KubeError) as caught:
        await kube.list(RESOURCE_CLAIMS)
    assert caught.value.status == 400
    assert server.methods == ["GET"]


async def test_retries_stop_after_ten_and_raise_the_last_refusal(serve: Any) -> None:
    server, kube = await serve(lambda n: refused())
    with pytest.raises(KubeError) as caught:
        await kube.list(RESOURCE_CLAIMS)
    assert caught.value.status == 429
    assert len(server.methods) == 11
