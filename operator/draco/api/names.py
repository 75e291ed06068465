"""Small pure helpers for names the API composes: qualified attribute names and request
references.

Attribute and capacity names are ``<id>`` or ``<domain>/<id>``; an unqualified name
belongs to the device's driver domain. Constraints, configs and allocation results name a
request as ``<request>`` or ``<request>/<subrequest>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

__all__ = [
    "RequestReference",
    "format_request_reference",
    "natural_sort_key",
    "natural_sorted",
    "parse_request_reference",
    "qualify_name",
    "split_qualified_name",
]


def split_qualified_name(name: str, *, default_domain: str) -> tuple[str, str]:
    """``(domain, id)`` of an attribute or capacity name, split at the first ``/``.

    ``split_qualified_name("model", default_domain="gpu.example.com")`` is
    ``("gpu.example.com", "model")``; a name with a domain keeps its own.
    """
    domain, slash, identifier = name.partition("/")
    if not slash:
        return default_domain, name
    return domain, identifier


def qualify_name(name: str, *, default_domain: str) -> str:
    """The fully qualified ``domain/id`` form of an attribute or capacity name."""
    domain, identifier = split_qualified_name(name, default_domain=default_domain)
    return f"{domain}/{identifier}"


class RequestReference(NamedTuple):
    """A parsed ``<request>`` or ``<request>/<subrequest>`` reference."""

    request: str
    subrequest: str | None = None

    def __str__(self) -> str:
        return format_request_reference(self.request, self.subrequest)


def parse_request_reference(reference: str) -> RequestReference:
    """Split ``<request>/<subrequest>``; raises ``ValueError`` for more than one ``/`` or
    an empty part (validation reports those as field errors)."""
    parts = reference.split("/")
    if len(parts) > 2 or not all(parts):
        raise ValueError(
            f"request reference {reference!r} must be the name of a request in the claim or the "
            "name of a request and a subrequest separated by '/'"
        )
    return RequestReference(parts[0], parts[1] if len(parts) == 2 else None)


def format_request_reference(request: str, subrequest: str | None = None) -> str:
    return f"{request}/{subrequest}" if subrequest else request


_DIGITS = re.compile(r"(\d+)")


def natural_sort_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Orders ``dev-2`` before ``dev-10``: digit runs compare as numbers, the rest as text."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS.split(text) if part)


def natural_sorted(texts: Iterable[str]) -> list[str]:
    """``texts`` in :func:`natural_sort_key` order (for what people read: columns, Events)."""
    return sorted(texts, key=natural_sort_key)
