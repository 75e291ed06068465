"""The admission server of `draco webhook`: plain aiohttp over HTTPS, no Kopf.

    POST /validate   AdmissionReview v1 for the validating webhooks (all five kinds; claims
                     being created are charged to their namespace's device quota)
    POST /validate-quota  ... only the device quota of claims being created (the operator's)
    POST /mutate     AdmissionReview v1 for the mutating ones (defaults, `timeAdded`)
    POST /mutate-pods            the pod webhook: gate pods that use draco
    POST /mutate-pods/translate  ... and translate the native `spec.resourceClaims`
    POST /mutate-workloads       translate them in workloads' pod templates
    POST /convert    ConversionReview v1 for draco's CRDs (v1beta1, v1beta2 <-> v1)
    GET  /healthz    200 while the loop answers and the certificate reloader runs
    GET  /readyz     200 once the certificate is loaded and the port is bound
    GET  /metrics    Prometheus text: requests by webhook, kind, operation and verdict

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
from dataclasses import dataclass, field
from typing import Final, Literal

import aiohttp.web
from prometheus_client import Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from draco.api.crds import CONVERSION_PATH
from draco.logs import get_logger
from draco.runtime.health import Health
from draco.runtime.metrics import REGISTRY
from draco.runtime.tls import ReloadingServerContext, certificate_not_after
from draco.webhook.admission import (
    AdmissionOutcome,
    NamespaceLabels,
    allowance,
    decode_review,
    mutate,
    validate,
    warm_up,
)
from draco.webhook.configuration import (
    MUTATE_PATH,
    MUTATE_PODS_PATH,
    MUTATE_PODS_TRANSLATE_PATH,
    MUTATE_WORKLOADS_PATH,
    VALIDATE_PATH,
    VALIDATE_QUOTA_PATH,
)
from draco.webhook.conversion import convert_review
from draco.webhook.podadmission import ClassCache, mutate_pod, mutate_workload
from draco.webhook.quota import QuotaCharger

__all__ = ["MAX_REQUEST_BYTES", "WebhookServer"]

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

Webhook = Literal[
    "validate",
    "validate-quota",
    "mutate",
    "mutate-pods",
    "mutate-pods-translate",
    "mutate-workloads",
    "convert",
]

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
    """One HTTPS listener serving both webhooks and the probes."""

    tls: ReloadingServerContext
    namespace_labels: NamespaceLabels | None
    listen_address: str = "0.0.0.0"
    port: int = 9443
    reload_interval: float = 10.0
    #: DeviceClasses for the pod webhook (extended resources); None: none are read.
    device_classes: ClassCache = field(default_factory=lambda: ClassCache(None))
    health: Health = field(default_factory=Health)
    #: Charges claims being created to their namespace's device quotas; None: no quota.
    quota: QuotaCharger | None = None
    _runner: aiohttp.web.AppRunner | None = None
    _reloader: asyncio.Task[None] | None = None

    def application(self) -> aiohttp.web.Application:
        app = aiohttp.web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.add_routes(
            [
                aiohttp.web.post(VALIDATE_PATH, self._validate),
                aiohttp.web.post(VALIDATE_QUOTA_PATH, self._validate_quota),
                aiohttp.web.post(MUTATE_PATH, self._mutate),
                aiohttp.web.post(MUTATE_PODS_PATH, self._mutate_pods),
                aiohttp.web.post(MUTATE_PODS_TRANSLATE_PATH, self._mutate_pods_translate),
                aiohttp.web.post(MUTATE_WORKLOADS_PATH, self._mutate_workloads),
                aiohttp.web.post(CONVERSION_PATH, self._convert),
                aiohttp.web.get("/healthz", self.healthz),
                aiohttp.web.get("/readyz", self.readyz),
                aiohttp.web.get("/metrics", metrics),
            ]
        )
        return app

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

    async def _validate(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await self._review(request, "validate")

    async def _validate_quota(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await self._review(request, "validate-quota")

    async def _mutate(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await self._review(request, "mutate")

    async def _mutate_pods(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await self._review(request, "mutate-pods")

    async def _mutate_pods_translate(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await self._review(request, "mutate-pods-translate")

    async def _mutate_workloads(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await self._review(request, "mutate-workloads")

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

    async def _review(self, request: aiohttp.web.Request, webhook: Webhook) -> aiohttp.web.Response:
        started = time.perf_counter()
        kind = operation = ""
        verdict = "error"
        IN_FLIGHT.labels(webhook).inc()
        try:
            raw = await request.read()
            try:
                review = await asyncio.to_thread(decode_review, raw)
            except ValueError as err:
                verdict = "malformed"
                return aiohttp.web.json_response({"error": str(err)}, status=400)
            kind = str((review.get("kind") or {}).get("kind") or "")
            if review.get("subResource"):
                kind = f"{kind}/{review['subResource']}"
            operation = str(review.get("operation") or "")
            outcome: AdmissionOutcome
            if webhook == "validate":
                outcome = await validate(review, namespace_labels=self.namespace_labels)
                if self.quota is not None:
                    outcome = await self.quota.admit(review, outcome)
            elif webhook == "validate-quota":
                outcome = allowance(review)
                if self.quota is not None:
                    outcome = await self.quota.admit(review, outcome)
            elif webhook == "mutate":
                outcome = await mutate(review)
            elif webhook == "mutate-workloads":
                outcome = mutate_workload(review)
            else:
                translate = webhook == "mutate-pods-translate"
                outcome = await mutate_pod(review, classes=self.device_classes, translate=translate)
            verdict = outcome.verdict
            if verdict == "denied":
                log.info("Rejected a write", kind=kind, operation=operation, user=_user(review),
                         message=outcome.review["response"]["status"]["message"][:2000])  # fmt: skip
            return aiohttp.web.json_response(outcome.review)
        except aiohttp.web.HTTPException:
            verdict = "malformed"
            raise
        except Exception:
            log.exception("Admission request failed", webhook=webhook, kind=kind, operation=operation)
            return aiohttp.web.json_response({"error": "internal error"}, status=500)
        finally:
            IN_FLIGHT.labels(webhook).dec()
            REQUESTS.labels(webhook, kind, operation, verdict).inc()
            LATENCY.labels(webhook, kind, operation, verdict).observe(time.perf_counter() - started)


def _user(review: dict[str, object]) -> str:
    info = review.get("userInfo")
    return str(info.get("username", "")) if isinstance(info, dict) else ""


async def metrics(_: aiohttp.web.Request) -> aiohttp.web.Response:
    body = generate_latest(REGISTRY)
    return aiohttp.web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
