"""The admission server of `draco webhook`: Kopf's admission server for draco's handlers
(`kopf.WebhookServerProtocol`: Kopf hands it the function that answers an AdmissionReview
with the handlers of `draco.webhook.handlers`), over HTTPS with aiohttp.

    POST /validate   AdmissionReview v1 for the validating webhooks (all five kinds; claims
                     being created are charged to their namespace's device quota)
    POST /validate-quota  ... only the device quota of claims being created (the operator's)
    POST /mutate     AdmissionReview v1 for the mutating ones (defaults, `timeAdded`)
    POST /mutate-pods            the pod webhook: gate pods that use draco
    POST /mutate-pods/translate  ... and translate the native `spec.resourceClaims`
    POST /mutate-workloads       translate them in workloads' pod templates
    POST /convert    ConversionReview v1 for draco's CRDs (v1beta1, v1beta2 <-> v1): draco's
                     own, Kopf has no conversion
    GET  /healthz    200 while the loop answers and the certificate reloader runs
    GET  /readyz     200 once the certificate is loaded and the port is bound

The admission port answers the API server, and anyone who reaches it: it serves no
metrics (`--metrics-port` does, as the other processes do, `draco.runtime.metricsserver`);
`/healthz` and `/readyz` say only whether it answers, as kube-apiserver's own do to
anyone.

Each admission path is one handler id: Kopf is asked with that id as the webhook, so only
that handler answers. Why draco serves instead of Kopf's own `kopf.WebhookServer`: the
paths stay those of draco's configurations (the chart's, `--print-configuration`'s), the
certificate is reloaded in place, request bodies may be as large as the API server sends,
requests are counted and timed, the CRDs' conversion is served on the same port; and two
answers of Kopf's are corrected (docs/architecture.md, "Where Kopf falls short"): a
refusal gets the `reason` that goes with its code (Kopf answers the code alone; clients
tell Invalid and Forbidden apart by it), and a handler that failed unexpectedly (Kopf
answers a denial with code 500) is an HTTP 500, so the API server applies the webhook's
`failurePolicy` rather than a verdict nobody reached.

Request bodies may be as large as kube-apiserver sends: an object may be up to its 3 MiB
request limit, and an update carries the new and the old object, so the limit is twice
that plus room for the envelope (aiohttp's default, 1 MiB, refused updates of large
ResourceSlices with 413).

The certificate and key are read from files and reloaded in place when they change
(`ReloadingServerContext`, checked every `reload_interval` seconds). CPU-bound work runs in
threads (see `draco.webhook.admission`); an unexpected error answers 500, so the API
server applies the webhook's `failurePolicy` rather than a verdict we did not reach.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

import aiohttp.web
import kopf
from prometheus_client import Counter, Gauge, Histogram

from draco.api.crds import CONVERSION_PATH
from draco.logs import get_logger
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.tls import ReloadingServerContext, certificate_not_after
from draco.webhook.admission import decode_review, warm_up
from draco.webhook.configuration import (
    MUTATE_PATH,
    MUTATE_PODS_PATH,
    MUTATE_PODS_TRANSLATE_PATH,
    MUTATE_WORKLOADS_PATH,
    VALIDATE_AGENT_EVENTS_PATH,
    VALIDATE_PATH,
    VALIDATE_QUOTA_PATH,
)
from draco.webhook.conversion import convert_review
from draco.webhook.handlers import (
    MUTATE,
    MUTATE_PODS,
    MUTATE_PODS_TRANSLATE,
    MUTATE_WORKLOADS,
    VALIDATE,
    VALIDATE_AGENT_EVENTS,
    VALIDATE_QUOTA,
)

__all__ = ["MAX_REQUEST_BYTES", "PATHS", "WebhookServer"]

log = get_logger(__name__)

#: kube-apiserver's default `--max-request-body-bytes` (genericapiserver: 3 MiB).
API_SERVER_MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
#: The largest AdmissionReview we read: object + oldObject, each up to the API server's
#: limit, plus 1 MiB for the envelope (userInfo, options, field names).
MAX_REQUEST_BYTES: Final = 2 * API_SERVER_MAX_REQUEST_BYTES + 1024 * 1024

#: Readiness conditions of the webhook process.
CERTIFICATE_LOADED: Final = "certificate-loaded"
WARMED_UP: Final = "warmed-up"
SERVING: Final = "serving"

#: The admission paths of draco's configurations and the handler id each is answered by.
PATHS: Final[Mapping[str, str]] = {
    VALIDATE_PATH: VALIDATE,
    VALIDATE_QUOTA_PATH: VALIDATE_QUOTA,
    MUTATE_PATH: MUTATE,
    MUTATE_PODS_PATH: MUTATE_PODS,
    MUTATE_PODS_TRANSLATE_PATH: MUTATE_PODS_TRANSLATE,
    MUTATE_WORKLOADS_PATH: MUTATE_WORKLOADS,
    VALIDATE_AGENT_EVENTS_PATH: VALIDATE_AGENT_EVENTS,
}
#: The reason the API server gives with each refusal's code (apimachinery's StatusReason).
REASONS: Final[Mapping[int, str]] = {400: "BadRequest", 403: "Forbidden", 409: "Conflict", 422: "Invalid"}
#: The code of Kopf's answer when a handler raised anything but `kopf.AdmissionError`.
HANDLER_FAILED: Final = 500

Verdict = Literal["allowed", "denied", "patched", "error", "malformed"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUESTS = Counter(
    "draco_webhook_requests",
    "Admission requests answered, by webhook, kind (with /subresource), operation and verdict "
    "(allowed, denied, patched, error, malformed).",
    ["webhook", "kind", "operation", "verdict"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "draco_webhook_request_duration_seconds",
    "Time from reading an admission request to answering it.",
    ["webhook", "kind", "operation", "verdict"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "draco_webhook_requests_in_flight", "Admission requests being answered.", ["webhook"], registry=REGISTRY
)
CERT_RELOADS = Counter(
    "draco_webhook_certificate_reloads",
    "Times the serving certificate was reloaded from changed files, by result.",
    ["result"],
    registry=REGISTRY,
)
CERT_EXPIRY = Gauge(
    "draco_webhook_certificate_expiration_timestamp_seconds",
    "When the serving certificate in use expires (Unix time).",
    registry=REGISTRY,
)


@dataclass
class WebhookServer:
    """One HTTPS listener serving the webhooks and the probes: Kopf's admission server
    (``settings.admission.server``), started by Kopf once it knows the cluster's resources."""

    tls: ReloadingServerContext
    listen_address: str = "0.0.0.0"
    port: int = 9443
    reload_interval: float = 10.0
    health: Health = field(default_factory=Health)
    #: Set once requests are answered (the port is bound).
    serving: asyncio.Event = field(default_factory=asyncio.Event)
    _answer: kopf.WebhookFn | None = None
    _runner: aiohttp.web.AppRunner | None = None
    _reloader: asyncio.Task[None] | None = None

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        """Kopf's server protocol: serve with `fn` answering the reviews until cancelled.
        What it yields is where the API server reaches us; draco's configurations are
        written by the chart or `--register`, never by Kopf, so Kopf only keeps it."""
        self.answer_with(fn)
        await self.start()
        try:
            yield kopf.WebhookClientConfig(url=f"https://{self.listen_address}:{self.port}")
            await asyncio.Event().wait()
        finally:
            await self.stop()

    def answer_with(self, fn: kopf.WebhookFn) -> None:
        """Answer the admission paths with `fn` (Kopf's: what Kopf hands its server)."""
        self._answer = fn

    def application(self) -> aiohttp.web.Application:
        app = aiohttp.web.Application(client_max_size=MAX_REQUEST_BYTES)
        routes = [aiohttp.web.post(path, self._handler_for(hid)) for path, hid in PATHS.items()]
        app.add_routes(
            [
                *routes,
                aiohttp.web.post(CONVERSION_PATH, self._convert),
                aiohttp.web.get("/healthz", self.healthz),
                aiohttp.web.get("/readyz", self.readyz),
            ]
        )
        return app

    def _handler_for(self, webhook: str) -> Any:
        async def handle(request: aiohttp.web.Request) -> aiohttp.web.Response:
            return await self._review(request, webhook)

        return handle

    async def start(self) -> None:
        """Bind and serve; returns once requests are answered in time (ready)."""
        self.health.require(CERTIFICATE_LOADED)
        self.health.require(WARMED_UP)
        self.health.require(SERVING)
        CERT_EXPIRY.set(certificate_not_after(self.tls.cert_file).timestamp())
        self.health.mark_ready(CERTIFICATE_LOADED)
        self._reloader = asyncio.create_task(self._reload_certificates(), name="draco-webhook-certificates")
        self.health.watch("certificate-reloader", self._reloader)
        started = time.perf_counter()
        await asyncio.to_thread(warm_up)
        # Everything loaded so far (modules, the CEL parser, the models' validators) lives
        # as long as the process: keep it out of the collector's full passes, which stop
        # every thread (the loop included) for ~250 ms on a busy node otherwise.
        gc.freeze()
        self.health.mark_ready(WARMED_UP)
        log.info("Warmed up validation", seconds=round(time.perf_counter() - started, 3))
        self._runner = aiohttp.web.AppRunner(
            self.application(), handle_signals=False, access_log=None, shutdown_timeout=10
        )
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, self.listen_address, self.port, ssl_context=self.tls.context)
        await site.start()
        self.health.mark_ready(SERVING)
        self.serving.set()
        log.info("Serving admission", address=self.listen_address, port=self.port, max_body=MAX_REQUEST_BYTES)

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _reload_certificates(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                reloaded = self.tls.check()
            except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
                CERT_RELOADS.labels("error").inc()
                if not failing:
                    log.warning("Certificate files changed but do not load; serving the previous pair",
                                cert_file=str(self.tls.cert_file), error=str(err))  # fmt: skip
                failing = True
                continue
            failing = False
            if reloaded:
                CERT_RELOADS.labels("success").inc()
                not_after = certificate_not_after(self.tls.cert_file)
                CERT_EXPIRY.set(not_after.timestamp())
                log.info("Reloaded the serving certificate", not_after=not_after.isoformat())

    async def healthz(self, _: aiohttp.web.Request) -> aiohttp.web.Response:
        dead = self.health.dead_tasks()
        return aiohttp.web.json_response({"alive": not dead, "dead": dead}, status=500 if dead else 200)

    async def readyz(self, _: aiohttp.web.Request) -> aiohttp.web.Response:
        waiting = sorted(self.health.pending)
        return aiohttp.web.json_response(
            {"ready": not waiting, "waiting": waiting}, status=503 if waiting else 200
        )

    async def _convert(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        started = time.perf_counter()
        verdict = "error"
        IN_FLIGHT.labels("convert").inc()
        try:
            raw = await request.read()
            try:
                answer = await asyncio.to_thread(convert_review, json.loads(raw))
            except ValueError as err:
                verdict = "malformed"
                return aiohttp.web.json_response({"error": str(err)}, status=400)
            verdict = "allowed" if answer["response"]["result"]["status"] == "Success" else "denied"
            return aiohttp.web.json_response(answer)
        finally:
            IN_FLIGHT.labels("convert").dec()
            REQUESTS.labels("convert", "", "CONVERT", verdict).inc()
            LATENCY.labels("convert", "", "CONVERT", verdict).observe(time.perf_counter() - started)

    async def _review(self, request: aiohttp.web.Request, webhook: str) -> aiohttp.web.Response:
        started = time.perf_counter()
        kind = operation = ""
        verdict: Verdict = "error"
        IN_FLIGHT.labels(webhook).inc()
        try:
            raw = await request.read()
            try:
                review = await asyncio.to_thread(decode_review, raw)
            except ValueError as err:
                verdict = "malformed"
                return aiohttp.web.json_response({"error": str(err)}, status=400)
            payload = review["request"]
            kind = str((payload.get("kind") or {}).get("kind") or "")
            if payload.get("subResource"):
                kind = f"{kind}/{payload['subResource']}"
            operation = str(payload.get("operation") or "")
            answer = await self._ask_kopf(request, review, webhook)
            if answer is None:
                return aiohttp.web.json_response({"error": "internal error"}, status=500)
            verdict = _verdict(answer)
            if verdict == "denied":
                log.info("Rejected a write", kind=kind, operation=operation, user=_user(payload),
                         message=answer["response"]["status"]["message"][:2000])  # fmt: skip
            return aiohttp.web.json_response(answer)
        except aiohttp.web.HTTPException:
            verdict = "malformed"
            raise
        finally:
            IN_FLIGHT.labels(webhook).dec()
            REQUESTS.labels(webhook, kind, operation, verdict).inc()
            LATENCY.labels(webhook, kind, operation, verdict).observe(time.perf_counter() - started)

    async def _ask_kopf(
        self, request: aiohttp.web.Request, review: dict[str, Any], webhook: str
    ) -> dict[str, Any] | None:
        """Kopf's answer with draco's corrections, or None when no verdict was reached (a
        handler failed, or Kopf could not take the request): the caller answers 500."""
        payload = review["request"]
        where = {"webhook": webhook, "kind": (payload.get("kind") or {}).get("kind"),
                 "operation": payload.get("operation")}  # fmt: skip
        if self._answer is None:
            log.error("Admission request failed: not serving through Kopf yet", **where)
            return None
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        try:
            answered = await self._answer(
                cast(Any, review), webhook=webhook, headers=dict(request.headers), sslpeer=peer
            )
            answer: dict[str, Any] = dict(answered)
        except Exception:
            log.exception("Admission request failed", **where)
            return None
        response = answer.get("response") or {}
        status = response.get("status")
        if response.get("allowed") is False and isinstance(status, dict):
            code = status.get("code")
            if not isinstance(code, int) or code == HANDLER_FAILED or code not in REASONS:
                log.error("Admission request failed", **where, error=str(status.get("message", ""))[:2000])
                return None
            status["reason"] = REASONS[code]
        return answer


def _verdict(answer: Mapping[str, Any]) -> Verdict:
    response = answer.get("response") or {}
    if not response.get("allowed"):
        return "denied"
    return "patched" if response.get("patch") else "allowed"


def _user(payload: Mapping[str, object]) -> str:
    info = payload.get("userInfo")
    return str(info.get("username", "")) if isinstance(info, dict) else ""
