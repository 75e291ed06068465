"""The conversion webhook of draco's CRDs (``POST /convert``): a ConversionReview in, every
object converted to the desired version (`draco.api.versions`) out. Pure: no I/O.

The API server sends one review per request, with the objects of a list or watch batch in
it; an object that cannot be converted fails the whole review, as the API server expects
(it then answers the client with the message)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from draco.api.versions import convert
from draco.errors import InvalidObjectError

__all__ = ["CONVERSION_API_VERSION", "convert_review"]

CONVERSION_API_VERSION: Final = "apiextensions.k8s.io/v1"


def convert_review(review: Mapping[str, Any]) -> dict[str, Any]:
    """The ConversionReview answering `review` (raises `ValueError` when it is none)."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if (
        not isinstance(review, Mapping)
        or review.get("kind") != "ConversionReview"
        or not isinstance(request, Mapping)
    ):
        raise ValueError("not a ConversionReview with a request")
    uid = str(request.get("uid", ""))
    desired = str(request.get("desiredAPIVersion", ""))
    objects = request.get("objects") or []
    response: dict[str, Any] = {"uid": uid}
    try:
        response["convertedObjects"] = [convert(obj, desired) for obj in objects]
    except InvalidObjectError as err:
        response["result"] = {"status": "Failure", "message": str(err)}
    else:
        response["result"] = {"status": "Success"}
    return {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": response}
