"""Building ``status.allocation`` for each claim from what the search chose.

The shape follows upstream field by field: results in allocation order, the request's
tolerations copied, binding conditions copied from the device, a share id and every
capacity's consumed amount for shared devices; class configs once per class, then the
claim's configs that apply to the allocated (sub)requests, ``requests`` dropped where a
config covers every request; a node selector pinning the node when any device is local
to it (or binds to it), else the merged term of the slices' selectors, else none.

The allocation shares no object with the claim or the class it was built from (configs
are copied): the operator adds fields to it and writes it as it is.

Share ids are derived, not random: a name-based UUID of the claim, the request, the
device and the result's position, so the same inputs give the same allocation.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from draco.allocator.devices import DeviceRecord
from draco.api.quantity import Quantity

__all__ = ["Pick", "RequestChoice", "build_allocation", "share_id"]


class RequestChoice(Protocol):
    """What results and configs need of the (sub)request a device was allocated for."""

    @property
    def request(self) -> str: ...
    @property
    def admin(self) -> bool: ...
    @property
    def tolerations(self) -> list[Mapping[str, Any]]: ...
    @property
    def class_name(self) -> str: ...
    @property
    def class_data(self) -> Mapping[str, Any]: ...


class Pick(Protocol):
    """One device allocated for one (sub)request, with what it consumes when shared."""

    @property
    def plan(self) -> RequestChoice: ...
    @property
    def device(self) -> DeviceRecord: ...
    @property
    def consumed(self) -> dict[str, Quantity] | None: ...


_SHARE_NAMESPACE = uuid.UUID("6f1f5b8e-4d43-5a57-9b1c-6472616331a0")


def share_id(*, claim: str, request: str, device: str, position: int) -> str:
    """A stable lower-case UUID for one share of a device."""
    return str(uuid.uuid5(_SHARE_NAMESPACE, f"{claim}\x00{request}\x00{device}\x00{position}"))


def _result(chosen: Pick, *, claim_identity: str, position: int) -> dict[str, Any]:
    plan, device = chosen.plan, chosen.device
    result: dict[str, Any] = {
        "request": plan.request,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.name,
    }
    if plan.admin:
        result["adminAccess"] = True
    if plan.tolerations:
        result["tolerations"] = [dict(t) for t in plan.tolerations]
    if device.binding_conditions:
        result["bindingConditions"] = list(device.binding_conditions)
    if device.binding_failure_conditions:
        result["bindingFailureConditions"] = list(device.binding_failure_conditions)
    if device.allow_multiple:
        result["shareID"] = share_id(
            claim=claim_identity, request=plan.request, device=device.describe(), position=position
        )
        if chosen.consumed:
            result["consumedCapacity"] = {
                # Canonical form, as upstream writes a Quantity (1000M is written 1G).
                name: str(amount)
                for name, amount in sorted(chosen.consumed.items())
            }
    return result


def _configs(claim: Mapping[str, Any], requests: Sequence[tuple[str, RequestChoice]]) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = []
    class_positions: dict[str, tuple[int, int]] = {}
    chosen_names: dict[str, str] = {}
    for name, plan in requests:
        chosen_names[name] = plan.request
        positions = class_positions.get(plan.class_name)
        if positions is not None:
            for i in range(*positions):
                configs[i]["requests"].append(plan.request)
            continue
        start = len(configs)
        for config in (plan.class_data.get("spec") or {}).get("config") or []:
            entry = {key: copy.deepcopy(value) for key, value in config.items() if key != "requests"}
            configs.append({"source": "FromClass", "requests": [plan.request], **entry})
        class_positions[plan.class_name] = (start, len(configs))
    for config in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        named = list(config.get("requests") or [])
        entry = {key: copy.deepcopy(value) for key, value in config.items() if key != "requests"}
        if not named:
            configs.append({"source": "FromClaim", **entry})
            continue
        if any(name in named or chosen_names[name] in named for name in chosen_names):
            configs.append({"source": "FromClaim", "requests": named, **entry})
    for config in configs:
        covered = config.get("requests")
        if covered and all(name in covered or chosen_names[name] in covered for name in chosen_names):
            del config["requests"]
    return configs


def _same_requirement(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a.get("key") == b.get("key")
        and a.get("operator") == b.get("operator")
        and set(a.get("values") or ()) == set(b.get("values") or ())
    )


def _node_selector(chosen: Sequence[Pick], node: str) -> dict[str, Any] | None:
    fields: list[Mapping[str, Any]] = []
    expressions: list[Mapping[str, Any]] = []
    for entry in chosen:
        device = entry.device
        if device.node_name is not None or device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        terms = (device.node_selector or {}).get("nodeSelectorTerms") or []
        if len(terms) == 1:
            for requirement in terms[0].get("matchFields") or []:
                if not any(_same_requirement(requirement, seen) for seen in fields):
                    fields.append(requirement)
            for requirement in terms[0].get("matchExpressions") or []:
                if not any(_same_requirement(requirement, seen) for seen in expressions):
                    expressions.append(requirement)
    if not fields and not expressions:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = [dict(r) for r in expressions]
    if fields:
        term["matchFields"] = [dict(r) for r in fields]
    return {"nodeSelectorTerms": [term]}


def build_allocation(
    *,
    claim: Mapping[str, Any],
    claim_key: str,
    requests: Sequence[tuple[str, RequestChoice]],
    chosen: Sequence[Pick],
    node: str,
) -> dict[str, Any]:
    """The ``status.allocation`` of one claim, in the Kubernetes JSON shape: ``requests``
    are the claim's requests in spec order, each with the (sub)request allocated for it;
    ``chosen`` the devices in allocation order."""
    identity = (claim.get("metadata") or {}).get("uid") or claim_key
    devices: dict[str, Any] = {
        "results": [_result(entry, claim_identity=identity, position=i) for i, entry in enumerate(chosen)]
    }
    configs = _configs(claim, requests)
    if configs:
        devices["config"] = configs
    allocation: dict[str, Any] = {"devices": devices}
    selector = _node_selector(chosen, node)
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation
