"""What the API server's answers (and the lack of one) mean, as `draco.errors`.

A refused request's body is a `Status` object; its code says which error of the
package's tree it is. A connection refused, reset or cut off mid-answer (the server
restarts, a proxy drops it), and the statuses that mean "not now" rather than "no",
become `APIUnavailableError`: one error callers can wait out (`draco.kube.reachable`),
not aiohttp's.
"""

from __future__ import annotations

from typing import Any, Final

import aiohttp
import orjson

from draco.errors import AlreadyExistsError, APIUnavailableError, ConflictError, KubeError, NotFoundError

__all__ = ["CONNECTION_ERRORS", "UNAVAILABLE_STATUSES", "error_from_status", "status_error", "unanswered"]

#: Too many requests (also what a watch cache re-initializing after a restart answers),
#: service unavailable, gateway timeout.
UNAVAILABLE_STATUSES: Final = frozenset({429, 503, 504})
#: aiohttp's errors for a connection refused, reset or cut off mid-answer.
CONNECTION_ERRORS: Final = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


def unanswered(what: str, exc: BaseException) -> APIUnavailableError:
    """The error for a request that got no (whole) answer."""
    return APIUnavailableError(
        f"{what}: the API server did not answer: {exc}", status=0, reason="Unavailable"
    )


def status_error(body: bytes, *, code: int, what: str, fallback: str = "") -> KubeError:
    """The error for a refused request's body: a `Status` object, or any text."""
    status: object = None
    if body:
        try:
            status = orjson.loads(body)
        except orjson.JSONDecodeError:
            status = None
    if not isinstance(status, dict):
        status = {"message": body.decode("utf-8", errors="replace") if body else fallback}
    if not status.get("reason") and fallback:
        status = {**status, "reason": fallback}  # the HTTP reason phrase, when no Status says more
    return error_from_status(status, what=what, code=code)


def error_from_status(status: dict[str, Any], *, what: str, code: int = 0) -> KubeError:
    """The error for a `Status` object (a refused request's body, a watch's ERROR event)."""
    message = str(status.get("message") or "")
    reason = str(status.get("reason") or "")
    code = code or int(status.get("code") or 0)
    text = f"{what}: {message}" if message else what
    if code == 404:
        return NotFoundError(text, status=code, reason=reason)
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExistsError(text, status=code, reason=reason)
    if code == 409:
        return ConflictError(text, status=code, reason=reason)
    if code in UNAVAILABLE_STATUSES:
        return APIUnavailableError(text, status=code, reason=reason)
    return KubeError(text, status=code, reason=reason)
