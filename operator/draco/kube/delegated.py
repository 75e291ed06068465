"""Who may read a process's `/metrics`: the API server says, as it does for
kube-controller-manager's and kube-scheduler's (delegated authentication and
authorization).

A request's bearer token is reviewed by the API server (a TokenReview: who it is, or
nobody), and that user is checked for the verb on the non-resource path (a
SubjectAccessReview: `get` on `/metrics`, what the ClusterRole the chart makes for
scrapers grants). Answers are kept 10 s, those components' default cache lifetime, so a
scrape every few seconds costs the API server two requests per scraper and 10 s, not per
scrape. `draco.runtime.metricsserver` asks; this knows the API.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

import aiohttp

from draco.errors import KubeError
from draco.kube.client import Kube, Resource, connect
from draco.logs import get_logger
from draco.runtime.metricsserver import Verdict

__all__ = ["SUBJECT_ACCESS_REVIEWS", "TOKEN_REVIEWS", "DelegatedAuthorizer"]

log = get_logger(__name__)

TOKEN_REVIEWS: Final = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
#: How long an answer is kept (kube-controller-manager's default for both reviews).
CACHE_SECONDS: Final = 10.0
#: Answers kept at most (tokens and users of the scrapers; a flood of garbage tokens
#: only pushes the oldest out).
_CACHE_SIZE: Final = 1024


class _Cache:
    def __init__(self, *, ttl: float, clock: Callable[[], float]) -> None:
        self.ttl = ttl
        self.clock = clock
        self._answers: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, key: str) -> Any | None:
        found = self._answers.get(key)
        if found is None or found[0] < self.clock():
            self._answers.pop(key, None)
            return None
        return found[1]

    def put(self, key: str, value: Any) -> None:
        self._answers[key] = (self.clock() + self.ttl, value)
        self._answers.move_to_end(key)
        while len(self._answers) > _CACHE_SIZE:
            self._answers.popitem(last=False)


class DelegatedAuthorizer:
    """`await authorize(token, path=, verb=)`: a `Verdict` from the API server's reviews."""

    def __init__(
        self, kube: Kube, *, ttl: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube = kube
        self._users = _Cache(ttl=ttl, clock=clock)
        self._decisions = _Cache(ttl=ttl, clock=clock)

    @classmethod
    async def connect(cls) -> DelegatedAuthorizer:
        """One over a client of its own (the metrics server runs its own event loop)."""
        return cls(await connect(field_manager="draco-metrics"))

    async def close(self) -> None:
        await self.kube.close()

    async def authorize(self, token: str | None, *, path: str, verb: str) -> Verdict:
        if not token:
            return Verdict(401, "Unauthorized: send a bearer token the API server accepts")
        try:
            user = await self._user(token)
            if user is None:
                return Verdict(401, "Unauthorized: the API server does not accept this token")
            allowed, reason = await self._allowed(user, path=path, verb=verb)
        except (KubeError, aiohttp.ClientError, TimeoutError) as err:
            log.warning("Could not review a metrics request", path=path, error=str(err))
            return Verdict(503, "the API server could not be asked who may read this")
        if not allowed:
            name = user.get("username", "")
            return Verdict(
                403, f'Forbidden: user "{name}" may not {verb} {path}' + (f": {reason}" if reason else "")
            )
        return Verdict(200)

    async def _user(self, token: str) -> Mapping[str, Any] | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._users.get(key)
        if cached is not None:
            return dict(cached) or None
        review = await self.kube.create(TOKEN_REVIEWS, {"metadata": {}, "spec": {"token": token}})
        status: Mapping[str, Any] = review.get("status") or {}
        user: dict[str, Any] = dict(status.get("user") or {}) if status.get("authenticated") else {}
        self._users.put(key, user)
        return user or None

    async def _allowed(self, user: Mapping[str, Any], *, path: str, verb: str) -> tuple[bool, str]:
        spec = {
            "user": user.get("username", ""),
            "uid": user.get("uid", ""),
            "groups": list(user.get("groups") or []),
            "extra": dict(user.get("extra") or {}),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        key = repr(sorted((k, repr(v)) for k, v in spec.items()))
        cached = self._decisions.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        review = await self.kube.create(SUBJECT_ACCESS_REVIEWS, {"metadata": {}, "spec": spec})
        status: Mapping[str, Any] = review.get("status") or {}
        decision = (bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or ""))
        self._decisions.put(key, decision)
        return decision
