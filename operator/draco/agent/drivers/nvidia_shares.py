"""GPU shares: a GPU published as one device that many claims allocate, each a share of its
memory (upstream's consumable capacity, KEP-5075), the way NVIDIA's DRA driver offers them
(its `--consumable-shares`).

`--nvidia-shares MODE[:GPUS]` (`SharePolicy.parse`) picks the mode and, optionally, the
GPUs (indices or UUIDs, comma-separated; all of the node's GPUs without). A shared device
has `allowMultipleAllocations: true` and its `memory` capacity gets a request policy:

- `memory`: `default` the whole memory, `validRange` 1Mi up to the whole memory in steps
  of 1Mi: a claim that asks `capacity.requests.memory: 40Gi` gets 40Gi of the GPU, one that
  asks nothing the whole GPU, and shares add up to at most the GPU's memory;
- `unlimited`: the same range from 0 with `default` 0: a claim that asks nothing takes no
  memory, so any number of such claims share the GPU.

The memory is rounded down to a whole MiB (the policy's `max` must be a multiple of its
step, as the API requires). On a MIG device the `multiprocessors` capacity NVML reports
becomes a consumable compute share too, in whole multiprocessors: a claim that asks
`capacity.requests.multiprocessors: 14` reserves 14 of them, one that asks nothing none
(so that memory alone decides how many shares fit; a default of all of them would let one
share in). A whole GPU has no compute share: NVML reports no multiprocessor count for it.
The MIG device's engine counts (`copyEngines`, `decoders`, ...) get the same policy: a
share takes none unless its claim asks (without a policy every share would take all of
them, and the second would not fit).

What a share is at run time is the driver's business (`nvidia.py`): NVML gives no way to
limit one container's memory or compute on a GPU, so the share is what the allocator
counts, and the claim's status says that nothing enforces it unless the claim runs it
under MPS (then the share's memory is the MPS pinned-memory limit of its clients).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from draco.agent.drivers.base import Device
from draco.errors import AgentError

__all__ = ["SHARE_MODES", "SharePolicy"]

SHARE_MODES: Final = ("memory", "unlimited")
_MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class SharePolicy:
    mode: str
    #: GPU indices (as text) and UUIDs; empty: every GPU.
    gpus: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, text: str | None) -> SharePolicy | None:
        """`memory`, `unlimited:0,1`, `memory:GPU-...`; None for empty or `off`."""
        if text is None or text.strip() in ("", "off"):
            return None
        mode, _, gpus = text.strip().partition(":")
        if mode not in SHARE_MODES:
            raise AgentError(
                f"--nvidia-shares {text!r}: the mode is one of {', '.join(SHARE_MODES)} (or off), "
                "optionally followed by :<GPU indices or UUIDs, comma-separated>"
            )
        names = frozenset(g.strip() for g in gpus.split(",") if g.strip())
        if gpus and not names:
            raise AgentError(f"--nvidia-shares {text!r}: no GPU named after the colon")
        return cls(mode=mode, gpus=names)

    def applies(self, *, index: int, uuid: str) -> bool:
        return not self.gpus or str(index) in self.gpus or uuid in self.gpus

    def unknown(self, known: Mapping[int, str]) -> list[str]:
        """The GPUs named that this node does not have (`known`: index to UUID)."""
        names = {str(i) for i in known} | set(known.values())
        return sorted(g for g in self.gpus if g not in names)

    def share(self, device: Device) -> Device:
        """`device` published as a shared one."""
        capacity: dict[str, Mapping[str, Any]] = {k: dict(v) for k, v in device.capacity.items()}
        memory = capacity.get("memory")
        if memory is not None:
            whole = int(str(memory["value"])) // _MIB * _MIB
            capacity["memory"] = {
                "value": str(whole),
                "requestPolicy": {
                    "default": str(whole) if self.mode == "memory" else "0",
                    "validRange": {
                        "min": "1Mi" if self.mode == "memory" else "0",
                        "max": str(whole),
                        "step": "1Mi",
                    },
                },
            }
        for name, entry in capacity.items():
            if name == "memory":
                continue
            count = str(entry["value"])
            if count == "0":
                continue  # nothing to share; consuming all of none is none
            capacity[name] = {
                "value": count,
                "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": count, "step": "1"}},
            }
        return replace(device, capacity=capacity, allow_multiple_allocations=True)
