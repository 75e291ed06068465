"""`draco webhook`: serve admission for draco's kinds as a process of its own: Kopf, running
the admission handlers of `draco.webhook.handlers` behind draco's server
(`draco.webhook.app`), with no peering (stateless: any number of replicas).

In a cluster: a Deployment behind a Service, with the certificate and key from files
(cert-manager or the chart's own) and the webhook configurations installed with it (the
Helm chart, charts/draco, or printed by `--print-configuration`):

    draco webhook --cert-file /tls/tls.crt --key-file /tls/tls.key

For development and tests, self-managed certificates (a CA and a serving certificate for
the `--dns-name`s) and, with `--register`, configurations the process writes itself at
start and removes at a clean exit:

    draco webhook --self-signed --dns-name 127.0.0.1 --register --url https://127.0.0.1:9443

`--listen-address` is where the server binds; the address the API server uses (the
Service, the URL) is a separate matter, named only in the configurations.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import kopf
import yaml

from draco.api.constants import GROUP
from draco.api.crds import CONVERSION_PATH, CONVERTED_KINDS, CRD_SPECS
from draco.errors import UnsupportedServerError
from draco.frame.login import register_login
from draco.frame.memories import AdmissionMemories
from draco.frame.settings import RefusalsLoggedElsewhere, configure_kopf
from draco.kube.capabilities import require_supported_server
from draco.kube.client import Kube, KubeError, Resource, connect
from draco.kube.delegated import DelegatedAuthorizer
from draco.kube.reachable import until_answered
from draco.logs import get_logger
from draco.runtime.health import Health, serve_health
from draco.runtime.metricsserver import add_metrics_arguments, metrics_serving, serve_metrics
from draco.runtime.tls import ReloadingServerContext, write_webhook_certificates
from draco.webhook.agentevents import object_reader
from draco.webhook.app import WebhookServer
from draco.webhook.configuration import CONFIGURATION_NAME, Endpoint, webhook_configurations
from draco.webhook.handlers import REGISTRY
from draco.webhook.namespaces import NamespaceReader
from draco.webhook.podadmission import ClassCache
from draco.webhook.pods import POD_BINDINGS
from draco.webhook.quota import QuotaCharger

__all__ = ["build_parser", "main"]

log = get_logger(__name__)

register_login(REGISTRY)

_ADMISSION = "admissionregistration.k8s.io"
VALIDATING: Final = Resource(
    _ADMISSION, "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", namespaced=False
)
MUTATING: Final = Resource(
    _ADMISSION, "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", namespaced=False
)
_FIELD_MANAGER: Final = "draco-webhook"
CRDS: Final = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draco webhook",
        description="Serve admission (validation and defaults) for the resource.draco.dev kinds.",
    )
    serve = parser.add_argument_group("serving")
    serve.add_argument("--listen-address", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    serve.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    serve.add_argument("--cert-file", type=Path, help="serving certificate (PEM), reloaded when it changes")
    serve.add_argument("--key-file", type=Path, help="its private key (PEM), reloaded when it changes")
    serve.add_argument(
        "--cert-reload-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often to check the certificate files for changes (default 10)",
    )
    add_metrics_arguments(serve, port=8080)
    serve.add_argument("--health-port", type=int, default=8081, help="/healthz and /readyz port (0: off)")

    dev = parser.add_argument_group("self-managed certificates (development and tests only)")
    dev.add_argument(
        "--self-signed",
        action="store_true",
        help="make a CA and a serving certificate for the --dns-name(s) instead of reading files",
    )
    dev.add_argument(
        "--dns-name",
        action="append",
        default=[],
        metavar="NAME",
        help="DNS name or IP address of the serving certificate (repeatable; default 127.0.0.1, localhost)",
    )
    dev.add_argument("--cert-dir", type=Path, help="where --self-signed writes ca.crt, tls.crt, tls.key")
    dev.add_argument(
        "--register",
        action="store_true",
        help="write the webhook configurations at start (removed at a clean exit)",
    )

    where = parser.add_argument_group("webhook configurations (with --print-configuration or --register)")
    where.add_argument(
        "--print-configuration", action="store_true", help="print the configurations as YAML and exit"
    )
    where.add_argument(
        "--service", metavar="NS/NAME", help="the API server reaches the webhook via this Service"
    )
    where.add_argument("--service-port", type=int, default=443, help="the Service's port (default 443)")
    where.add_argument("--url", help="... or at this base URL (https://host:port)")
    where.add_argument("--ca-file", type=Path, help="CA bundle (PEM) the API server trusts for the webhook")
    where.add_argument(
        "--inject-ca-from",
        metavar="NS/CERTIFICATE",
        help="leave caBundle to cert-manager's CA injector, from this Certificate",
    )
    where.add_argument(
        "--patch-crds",
        action="store_true",
        help="point the conversion webhook of draco's CRDs (v1beta1/v1beta2 <-> v1) at this webhook "
        "at start, with the CA of --ca-file or --inject-ca-from (needs --service or --url)",
    )
    where.add_argument(
        "--exempt-user",
        action="append",
        default=[],
        metavar="USER",
        help="user whose writes skip the Fail-policy webhooks (repeatable; e.g. the operator's "
        "system:serviceaccount:draco-system:draco-operator)",
    )
    where.add_argument(
        "--agent-user",
        action="append",
        default=[],
        metavar="USER",
        help="the node agents' user, whose Events the webhook checks are about its node's pods and "
        "claims (repeatable; e.g. system:serviceaccount:draco-system:draco-agent)",
    )
    pods = parser.add_argument_group("the pod webhook (docs/pods.md)")
    pods.add_argument(
        "--pod-webhook",
        choices=["off", "opted-in", "all"],
        default="opted-in",
        help="whose pods are gated: namespaces labelled resource.draco.dev/pod-webhook=enabled "
        "(default), all but those labelled =disabled and kube-system, or none",
    )
    pods.add_argument(
        "--translate-native-claims",
        choices=["off", "opted-in"],
        default="opted-in",
        help="translate spec.resourceClaims into draco's annotation in opted-in namespaces (default), "
        "or never (native DRA serves those pods)",
    )
    pods.add_argument(
        "--pod-binding",
        choices=list(POD_BINDINGS),
        default="kube-scheduler",
        help="who binds the pods the webhook hands to draco: kube-scheduler (default: draco's "
        "scheduling gate; draco allocates, pins the pod to its node and un-gates it) or draco "
        "(spec.schedulerName: draco; draco allocates and binds the pod itself, one write fewer "
        "and no kube-scheduler cycle; docs/pods.md)",
    )
    pods.add_argument(
        "--device-class-ttl",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long the DeviceClasses read for extended resources are reused (default 5)",
    )
    return parser


def _configurations(args: argparse.Namespace, endpoint: Endpoint) -> list[dict[str, object]]:
    return webhook_configurations(
        endpoint,
        exempt_users=tuple(args.exempt_user),
        agent_users=tuple(args.agent_user),
        pod_webhook=args.pod_webhook,
        translate_native=args.translate_native_claims,
    )


@dataclass(frozen=True)
class _Certificates:
    cert_file: Path
    key_file: Path
    ca_file: Path | None


def _endpoint(args: argparse.Namespace, *, ca_file: Path | None) -> Endpoint:
    if bool(args.service) == bool(args.url):
        raise SystemExit("draco webhook: name exactly one of --service NS/NAME and --url URL")
    if args.url and not args.url.startswith("https://"):
        raise SystemExit("draco webhook: --url must be https:// (the API server calls webhooks over TLS)")
    service: tuple[str, str] | None = None
    if args.service:
        namespace, _, name = args.service.partition("/")
        if not namespace or not name:
            raise SystemExit("draco webhook: --service takes NAMESPACE/NAME")
        service = (namespace, name)
    if ca_file is None and not args.inject_ca_from:
        raise SystemExit("draco webhook: the configurations need --ca-file (or --inject-ca-from)")
    return Endpoint(
        url=args.url,
        service=service,
        service_port=args.service_port,
        ca_bundle=ca_file.read_bytes() if ca_file is not None else None,
        inject_ca_from=args.inject_ca_from,
    )


def _certificates(args: argparse.Namespace) -> _Certificates:
    if args.self_signed:
        if args.cert_file or args.key_file:
            raise SystemExit(
                "draco webhook: --self-signed makes its own certificate; drop --cert-file/--key-file"
            )
        folder = args.cert_dir or Path(tempfile.mkdtemp(prefix="draco-webhook-"))
        names = args.dns_name or ["127.0.0.1", "localhost"]
        made = write_webhook_certificates(names, directory=folder)
        log.info("Made a self-signed CA and serving certificate", directory=str(folder), dns_names=names)
        return _Certificates(made.cert_file, made.key_file, args.ca_file or made.ca_file)
    if not (args.cert_file and args.key_file):
        raise SystemExit("draco webhook: give --cert-file and --key-file (or --self-signed for development)")
    return _Certificates(args.cert_file, args.key_file, args.ca_file)


async def _register(kube: Kube, configurations: list[dict[str, object]]) -> None:
    for configuration, resource in zip(configurations, (VALIDATING, MUTATING), strict=True):
        await kube.apply(resource, configuration, field_manager=_FIELD_MANAGER)
    log.info("Registered the webhook configurations", name=CONFIGURATION_NAME)


async def _patch_crds(kube: Kube, endpoint: Endpoint) -> None:
    """Point the conversion webhook of the CRDs whose versions differ in shape at us (their
    generated `clientConfig` names the chart's default Service and has no CA)."""
    conversion = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": endpoint.client_config(CONVERSION_PATH),
        },
    }
    for spec in CRD_SPECS:
        if spec.model.KIND not in CONVERTED_KINDS:
            continue
        name = f"{spec.plural}.{GROUP}"
        try:
            if endpoint.inject_ca_from:
                annotations = {"cert-manager.io/inject-ca-from": endpoint.inject_ca_from}
                await kube.patch(CRDS, name, {"metadata": {"annotations": annotations}})
            # A JSON patch replaces the whole block: a Service and a URL never end up side by side.
            await kube.patch(
                CRDS,
                name,
                [{"op": "add", "path": "/spec/conversion", "value": conversion}],
                patch_type="json",
            )
        except KubeError as err:
            log.warning("Could not point a CRD's conversion at the webhook", crd=name, error=str(err))
            continue
        log.info("Pointed a CRD's conversion at the webhook", crd=name)


async def _unregister(kube: Kube) -> None:
    for resource in (VALIDATING, MUTATING):
        try:
            await kube.delete(resource, CONFIGURATION_NAME)
        except KubeError as err:
            log.warning("Could not remove a webhook configuration", kind=resource.kind, error=str(err))
    log.info("Removed the webhook configurations", name=CONFIGURATION_NAME)


async def run(args: argparse.Namespace, certificates: _Certificates) -> None:
    """Kopf with draco's admission handlers and server, until SIGTERM/SIGINT (Kopf handles
    the signals while it runs)."""
    configurations = (
        _configurations(args, _endpoint(args, ca_file=certificates.ca_file)) if args.register else None
    )
    crd_endpoint = _endpoint(args, ca_file=certificates.ca_file) if args.patch_crds else None
    kube = await connect(field_manager=_FIELD_MANAGER)
    try:
        await until_answered(lambda: require_supported_server(kube), what="read the server version")
    except UnsupportedServerError as exc:
        await kube.close()
        raise SystemExit(f"draco webhook: {exc}") from exc
    except BaseException:
        await kube.close()
        raise
    health = Health()
    server = WebhookServer(
        tls=ReloadingServerContext(cert_file=certificates.cert_file, key_file=certificates.key_file),
        listen_address=args.listen_address,
        port=args.port,
        reload_interval=args.cert_reload_interval,
        health=health,
    )
    settings = configure_kopf(kopf.OperatorSettings(), watches_crds=True)
    settings.admission.server = server
    logging.getLogger("kopf.objects").addFilter(RefusalsLoggedElsewhere())
    # What the handlers need besides the request (`draco.webhook.handlers`).
    device_classes = ClassCache(kube, ttl=args.device_class_ttl)
    memo = kopf.Memo(
        namespace_labels=NamespaceReader(kube),
        device_classes=device_classes,
        quota=QuotaCharger(kube, classes=device_classes),
        pod_binding=args.pod_binding,
        agent_objects=object_reader(kube),
    )
    probes = await serve_health(health, port=args.health_port) if args.health_port else None
    after_serving = asyncio.create_task(
        _once_serving(kube, server, configurations=configurations, crd_endpoint=crd_endpoint),
        name="draco-webhook-registration",
    )
    try:
        # Stateless: any number of replicas answer side by side, so no peering.
        await kopf.operator(
            registry=REGISTRY,
            settings=settings,
            memo=memo,
            memories=AdmissionMemories(),
            standalone=True,
            clusterwide=True,
        )
        log.info("Stopping the webhook")
    finally:
        after_serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await after_serving
        if configurations is not None and server.serving.is_set():
            await _unregister(kube)
        if probes is not None:
            await probes.cleanup()
        await kube.close()


async def _once_serving(
    kube: Kube,
    server: WebhookServer,
    *,
    configurations: list[dict[str, object]] | None,
    crd_endpoint: Endpoint | None,
) -> None:
    """Register the configurations and point the CRDs' conversion here once requests are
    answered (the API server calls the webhook at once); done even while the API server
    is restarting, rather than exiting into CrashLoopBackOff."""
    await server.serving.wait()
    if configurations is not None:
        await until_answered(lambda: _register(kube, configurations), what="register the webhook")
    if crd_endpoint is not None:
        await until_answered(lambda: _patch_crds(kube, crd_endpoint), what="point the CRDs' conversion here")


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if args.print_configuration:
        endpoint = _endpoint(args, ca_file=args.ca_file)
        configurations = _configurations(args, endpoint)
        sys.stdout.write(yaml.safe_dump_all(configurations, sort_keys=False))
        return 0
    if args.cert_reload_interval <= 0:
        raise SystemExit("draco webhook: --cert-reload-interval must be more than 0 seconds")
    serving = metrics_serving(args, prog="draco webhook")
    certificates = _certificates(args)
    serve_metrics(serving, component="webhook", authorizer=DelegatedAuthorizer.connect)
    asyncio.run(run(args, certificates))
    return 0
