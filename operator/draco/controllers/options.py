"""The operator's run options, shared with every part through Kopf's memo (`memo.options`).

`draco operator` fills them from its command line; under `kopf run -m draco.controllers`
(tests with KopfRunner) the defaults apply: no metrics or probe servers, no admission
webhook, every namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["OperatorOptions", "PlacementPolicy"]

#: How the scheduler picks among nodes that fit: first in name order, most used, least used.
PlacementPolicy = Literal["first", "pack", "spread"]


@dataclass(frozen=True)
class OperatorOptions:
    namespaces: tuple[str, ...] = ()
    metrics_port: int = 0
    health_port: int = 0
    webhook: bool = False
    webhook_host: str | None = None
    webhook_port: int = 9443
    workers: int = 8
    placement_policy: PlacementPolicy = "first"
