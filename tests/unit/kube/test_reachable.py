"""Waiting out an API server that does not answer, and only that."""

from __future__ import annotations

import asyncio

import pytest

from draco.errors import APIUnavailableError, ConflictError, KubeError, NotFoundError, RetryableError
from draco.kube.client import error_from_status
from draco.kube.reachable import until_answered


class Flaky:
    """A call that fails with each of `errors` in turn, then answers."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


def unavailable() -> APIUnavailableError:
    return APIUnavailableError("GET /version: the API server did not answer", status=0)


def test_it_waits_out_unanswered_calls_with_a_doubling_capped_delay() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    call = Flaky(*(unavailable() for _ in range(6)), TimeoutError())
    result = asyncio.run(until_answered(call, what="read", first_delay_s=0.5, max_delay_s=10, sleep=sleep))
    assert result == "answer"
    assert call.calls == 8
    assert slept == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize(
    "error",
    [
        NotFoundError("gone", status=404),
        KubeError("forbidden", status=403, reason="Forbidden"),
        ValueError("a bug"),
    ],
)
def test_an_answer_that_is_no_is_not_retried(error: BaseException) -> None:
    async def sleep(seconds: float) -> None:
        raise AssertionError("slept on an answered call")

    call = Flaky(error)
    with pytest.raises(type(error)):
        asyncio.run(until_answered(call, what="read", sleep=sleep))
    assert call.calls == 1


@pytest.mark.parametrize("code", [429, 503, 504])
def test_statuses_that_mean_not_now_are_unavailable(code: int) -> None:
    error = error_from_status(
        {"message": "storage is (re)initializing", "reason": "TooManyRequests"}, what="list", code=code
    )
    assert isinstance(error, APIUnavailableError)
    assert isinstance(error, RetryableError)
    assert error.status == code


@pytest.mark.parametrize(
    ("code", "kind"), [(404, NotFoundError), (409, ConflictError), (500, KubeError), (403, KubeError)]
)
def test_other_statuses_keep_their_errors(code: int, kind: type[KubeError]) -> None:
    error = error_from_status({"message": "m"}, what="w", code=code)
    assert type(error) is kind
