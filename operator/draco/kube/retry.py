"""When a refused request is sent again: an answer that says "come back later".

kube-apiserver answers 429 with ``Retry-After`` when it cannot serve a request yet and has
not carried it out: "storage is (re)initializing" for a few moments after a CRD changed
(1.31 to 1.33, for a list that their new watch cache cannot serve yet; `draco webhook
--patch-crds` changes draco's CRDs at every start), and priority and fairness shedding
load. A 5xx with ``Retry-After`` says the same. client-go's REST client waits that many
seconds and sends the request again, up to 10 times, writes included; `draco.kube.client`
does the same with `send_until_answered`. Any other refusal is the caller's to handle. Watches are not retried here:
`draco.kube.watch` lists and watches again with its own backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from draco.logs import get_logger

__all__ = ["MAX_RETRIES", "RETRY_AFTER_MAX_S", "Answer", "retry_delay", "send_until_answered"]

log = get_logger(__name__)

#: How often one request is sent again (client-go's default).
MAX_RETRIES: Final = 10
#: The longest wait honoured; a longer ``Retry-After`` is cut to it.
RETRY_AFTER_MAX_S: Final = 30


def retry_delay(status: int, headers: Mapping[str, str]) -> int | None:
    """Seconds to wait before sending again a request answered `status` with `headers`
    (a 429 or 5xx with ``Retry-After`` in seconds); None: do not send it again."""
    if status != 429 and status < 500:
        return None
    try:
        seconds = int(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(max(seconds, 0), RETRY_AFTER_MAX_S)


@dataclass(frozen=True)
class Answer:
    """What the API server answered to one request, read in full."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    reason: str = ""


async def send_until_answered(send: Callable[[], Awaitable[Answer]], *, what: str) -> Answer:
    """`send()`'s answer, once the server stops saying "come back later" (or after
    `MAX_RETRIES` more tries: then the last refusal)."""
    for attempt in range(1, MAX_RETRIES + 1):
        answer = await send()
        delay = retry_delay(answer.status, answer.headers)
        if delay is None:
            return answer
        log.info("Request refused for now; sending it again", what=what, status=answer.status,
                 answer=answer.body[:200].decode(errors="replace"), delay=delay, attempt=attempt)  # fmt: skip
        await asyncio.sleep(delay)
    return await send()
