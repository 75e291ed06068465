"""MIG profiles, placements and the counters that say which partitions fit together.

Pure: no NVML, no I/O. The NVIDIA driver reads a GPU's GPU-instance profiles and their
possible placements from NVML and hands them here as `Profile` values; this module names
them and turns them into counters.

Names. A MIG partition is `gpu-<index>-mig-<profile>-<profile id>-<placement start>`,
e.g. `gpu-0-mig-1g10gb-19-0` and `gpu-0-mig-1g10gbme-20-0`: the NVML profile id and the
placement make the name unique on the GPU (`1g.10gb` and `1g.10gb+me` differ by id) and
stable (the same partition of the same GPU has the same name after a restart, whatever
GPU-instance id NVML gave it). The profile name is NVML's own (`7g.80gb`, not a rounding
of the memory size) when NVML reports one.

Counters. NVML places a GPU instance on a run of *memory slices* (`start`, `size`; eight
on an A100 or H100) and gives it a number of *compute slices*. Two partitions can exist
together exactly when their memory slices do not overlap, their compute slices add up to
no more than the GPU has, and no profile has more instances than NVML allows. The counter
set of a GPU says the same thing to the allocator: one counter per memory slice (each 1),
`compute-slices`, and `instances-<profile id>` for a profile with more placements than it
may have instances (`1g.10gb+me`: seven places, one instance). A partition consumes the
memory slices of its placement, its compute slices and one instance of its profile; the
whole GPU consumes every memory slice and every compute slice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Partition",
    "Placement",
    "Profile",
    "consumption",
    "counter_set",
    "fits_together",
    "partition_name",
    "partitions",
    "profile_name",
    "profile_slug",
    "whole_gpu_consumption",
]

Placement = tuple[int, int]


def profile_name(nvml_name: str, *, slices: int, memory_mib: int) -> str:
    """NVIDIA's name of a GPU-instance profile: NVML's (`MIG 1g.10gb+me` -> `1g.10gb+me`),
    or, for an NVML that reports no name, `<slices>g.<GiB rounded up>gb` as nvidia-smi
    prints it (81152 MiB -> `80gb`)."""
    name = nvml_name.strip()
    if name.upper().startswith("MIG "):
        name = name[4:].strip()
    return name or f"{slices}g.{math.ceil(memory_mib / 1024)}gb"


def profile_slug(name: str) -> str:
    """The profile name as part of a DNS label: `1g.10gb+me` -> `1g10gbme`."""
    return re.sub(r"[^a-z0-9]+", "", name.lower()) or "mig"


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile of a GPU, as NVML reports it."""

    #: The NVML profile index (`NVML_GPU_INSTANCE_PROFILE_*`) it was read with.
    index: int
    #: The profile id (`nvmlGpuInstanceProfileInfo_t.id`), what placements are keyed by.
    id: int
    name: str
    slices: int
    instances: int
    memory_mib: int
    #: Possible placements on the memory slices: (start, size).
    placements: tuple[Placement, ...]
    #: Engines of one instance, by NVIDIA's capacity names (`multiprocessors`, ...).
    engines: tuple[tuple[str, int], ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024


def partition_name(gpu_index: int, profile: Profile, start: int) -> str:
    return f"gpu-{gpu_index}-mig-{profile_slug(profile.name)}-{profile.id}-{start}"


def _memory_slices(profiles: Iterable[Profile]) -> int:
    return max((start + size for p in profiles for start, size in p.placements), default=0)


def _compute_slices(profiles: Iterable[Profile]) -> int:
    return max((p.slices for p in profiles), default=0)


def _limited(profiles: Iterable[Profile]) -> list[Profile]:
    """Profiles that may have fewer instances than they have placements."""
    return [p for p in profiles if 0 < p.instances < len(p.placements)]


def counter_set(name: str, profiles: Sequence[Profile]) -> dict[str, Any] | None:
    """The counter set of a GPU with `profiles`, in the API's shape; None without placements."""
    slices = _memory_slices(profiles)
    if not slices:
        return None
    counters: dict[str, dict[str, str]] = {f"memory-slice-{i}": {"value": "1"} for i in range(slices)}
    counters["compute-slices"] = {"value": str(_compute_slices(profiles))}
    for profile in _limited(profiles):
        counters[f"instances-{profile.id}"] = {"value": str(profile.instances)}
    return {"name": name, "counters": counters}


def consumption(
    counter_set_name: str, profiles: Sequence[Profile], profile: Profile, start: int
) -> dict[str, Any]:
    """What the partition of `profile` at `start` consumes (a `consumesCounters` entry)."""
    size = dict(profile.placements)[start]
    counters = {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)}
    counters["compute-slices"] = {"value": str(profile.slices)}
    if profile in _limited(profiles):
        counters[f"instances-{profile.id}"] = {"value": "1"}
    return {"counterSet": counter_set_name, "counters": counters}


def whole_gpu_consumption(counter_set_name: str, profiles: Sequence[Profile]) -> dict[str, Any]:
    """What the whole GPU consumes: every memory slice and every compute slice."""
    counters = {f"memory-slice-{i}": {"value": "1"} for i in range(_memory_slices(profiles))}
    counters["compute-slices"] = {"value": str(_compute_slices(profiles))}
    return {"counterSet": counter_set_name, "counters": counters}


@dataclass(frozen=True)
class Partition:
    """One partition a GPU could be cut into: a profile at one placement."""

    name: str
    profile: Profile
    start: int
    size: int


def partitions(gpu_index: int, profiles: Sequence[Profile]) -> list[Partition]:
    """Every (profile, placement) of a GPU, profiles in NVML's index order."""
    return [
        Partition(partition_name(gpu_index, p, start), p, start, size)
        for p in sorted(profiles, key=lambda p: p.index)
        for start, size in p.placements
    ]


def fits_together(chosen: Sequence[Partition], profiles: Sequence[Profile]) -> bool:
    """Whether NVML could create all of `chosen` at once (the rule the counters encode,
    stated directly: for tests and for checking a plan)."""
    used: set[int] = set()
    for part in chosen:
        span = set(range(part.start, part.start + part.size))
        if used & span:
            return False
        used |= span
    if sum(p.profile.slices for p in chosen) > _compute_slices(profiles):
        return False
    return all(sum(1 for p in chosen if p.profile == profile) <= profile.instances for profile in profiles)
