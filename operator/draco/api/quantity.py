"""Kubernetes resource quantities, as the API models use them.

The implementation is :mod:`draco.quantity`, outside this package so that code which
needs quantities but no API model (the CEL evaluator, its worker process) does not load
every pydantic model by importing ``draco.api``; this is the name the API layer and its
users import.
"""

from __future__ import annotations

from draco.quantity import QUANTITY_PATTERN, Quantity, QuantityFormat

__all__ = ["QUANTITY_PATTERN", "Quantity", "QuantityFormat"]
