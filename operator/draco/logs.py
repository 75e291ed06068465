"""Logging, configured once for the operator, the agent and the CLI.

Everything goes through structlog: one JSON object per line by default (`--log-format
json`), a readable console format with `--log-format text`. Records from the standard
library's `logging` — Kopf's own, aiohttp's — are routed through the same processors, so
a Kopf handler's log line and ours look alike and carry the same keys. Objects are
key/values (`pod="ns/name"`), never interpolated into the message.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import orjson
import structlog

__all__ = ["LogFormat", "configure_logging", "get_logger"]

LogFormat = Literal["json", "text"]

_configured: tuple[str, int] | None = None


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        _kopf_object_keys,
    ]


def _kopf_object_keys(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """Kopf attaches the object a handler runs for as `k8s_ref`; write it as draco does,
    keyed by its kind (`pod=ns/name`, `deviceclass=name`)."""
    ref = event.pop("k8s_ref", None)
    if isinstance(ref, dict):
        key = str(ref.get("kind") or "object").lower()
        namespace = ref.get("namespace")
        event.setdefault(key, f"{namespace}/{ref.get('name', '')}" if namespace else str(ref.get("name", "")))
    event.pop("k8s_skip", None)
    return event


def _json_line(event: dict[str, Any], **_: Any) -> str:
    """One record as a JSON line, with orjson (the operator writes lines per pod it
    places; the standard library's encoder cost a few percent of its CPU). What orjson
    cannot encode is written as its ``repr``, as structlog's own fallback does."""
    return orjson.dumps(event, default=repr, option=orjson.OPT_NON_STR_KEYS).decode()


def configure_logging(*, fmt: LogFormat = "json", level: str | int = "INFO") -> None:
    """Install the processors and the root handler. Safe to call again with new settings."""
    global _configured
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING or ERROR")
    if _configured == (fmt, numeric):
        return
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_json_line)
        exc = structlog.processors.format_exc_info
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        exc = None
    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    final: list[Any] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if exc is not None:
        final.append(exc)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[*final, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # Chatty libraries stay at WARNING unless asked for DEBUG.
    for noisy in ("aiohttp.access", "asyncio", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING if numeric > logging.DEBUG else numeric)
    _configured = (fmt, numeric)


def get_logger(name: str | None = None, **initial: Any) -> structlog.stdlib.BoundLogger:
    """A structlog logger; `initial` key/values are bound to every line it writes."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger.bind(**initial) if initial else logger
