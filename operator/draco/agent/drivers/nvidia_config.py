"""NVIDIA's opaque device configs (`GpuConfig`, `MigDeviceConfig`): read, checked, and what
they ask the GPU for.

Claims written for NVIDIA's DRA driver carry configs of this shape (apiVersion
`resource.nvidia.com/v1beta1`)::

    config:
    - requests: [ts-gpu]
      opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig              # MigDeviceConfig for a MIG device
          sharing:
            strategy: TimeSlicing      # or MPS
            timeSlicingConfig: {interval: Long}

`sharing_of` checks every config of a device and returns the one that applies (the last:
claim configs override class configs, a later entry an earlier one) as a `Sharing`, or
raises one `DeviceConfigError` naming *every* problem of every config at once, so a user
fixes them in one go. What the driver then does with a `Sharing` (`nvidia_sharing`):

- none, or `TimeSlicing` with interval `Default` (or none): nothing; the containers of the
  claims on the GPU share it the way CUDA shares it by default;
- `TimeSlicing` with `Short`, `Medium` or `Long`: the GPU's compute policy is set, as
  `nvidia-smi compute-policy --set-timeslice` does (whole GPUs only; NVIDIA refuses a
  time-slice on a MIG device too);
- `MPS`: an MPS control daemon for the claim's devices, with `mpsConfig`'s
  `defaultActiveThreadPercentage`, `defaultPinnedDeviceMemoryLimit` and
  `defaultPerDevicePinnedMemoryLimit` (keyed by the device's UUID or its index among the
  claim's devices).

Refused, with the reason: a `GpuConfig` on a MIG device or a `MigDeviceConfig` on a whole
GPU, unknown kinds, versions, fields, strategies and intervals, `mpsConfig` with
`TimeSlicing` and `timeSlicingConfig` with `MPS`, `multiUser` (draco's daemon runs as the
agent's user only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from draco.agent.drivers.base import OpaqueConfig
from draco.errors import DeviceConfigError
from draco.quantity import Quantity

__all__ = [
    "INTERVALS",
    "NVIDIA_CONFIG_API_VERSION",
    "MpsSettings",
    "Sharing",
    "check_configs",
    "config_problems",
    "sharing_of",
]

NVIDIA_CONFIG_API_VERSION: Final = "resource.nvidia.com/v1beta1"
_KIND_FOR: Final = {"gpu": "GpuConfig", "mig": "MigDeviceConfig"}
#: The time-slice intervals and the number `nvidia-smi compute-policy --set-timeslice` takes.
INTERVALS: Final = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
_MPS_FIELDS: Final = frozenset(
    {
        "defaultActiveThreadPercentage",
        "defaultPinnedDeviceMemoryLimit",
        "defaultPerDevicePinnedMemoryLimit",
        "multiUser",
    }
)


@dataclass(frozen=True)
class MpsSettings:
    """An `mpsConfig`, checked."""

    active_thread_percentage: int | None = None
    #: Bytes, for every device of the daemon.
    pinned_memory_limit: int | None = None
    #: Bytes, by device UUID or index among the claim's devices (overrides the default).
    per_device_pinned_memory_limit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Sharing:
    """What one device's applying config asks: `strategy` None is the GPU as it is."""

    strategy: str | None = None
    #: `Default`, `Short`, `Medium` or `Long` (TimeSlicing).
    interval: str = "Default"
    mps: MpsSettings | None = None
    #: Which config it came from, for messages.
    source: str = ""

    @property
    def changes_the_gpu(self) -> bool:
        return self.strategy == "MPS" or (self.strategy == "TimeSlicing" and self.interval != "Default")


def _bytes(value: Any, where: str, problems: list[str]) -> int | None:
    try:
        amount = Quantity(str(value))
    except (ValueError, TypeError):
        problems.append(f"{where}: {value!r} is not a quantity")
        return None
    nanos = amount.nanos
    if nanos < 1024 * 1024 * 10**9:
        problems.append(f"{where}: {value} is less than 1Mi")
        return None
    return nanos // 10**9


def _mps(raw: Any, where: str, problems: list[str]) -> MpsSettings:
    if raw is None:
        return MpsSettings()
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: mpsConfig must be an object")
        return MpsSettings()
    unknown = sorted(set(raw) - _MPS_FIELDS)
    if unknown:
        problems.append(f"{where}: unknown mpsConfig fields {unknown}")
    if raw.get("multiUser"):
        problems.append(
            f"{where}: mpsConfig.multiUser is not supported by draco (its MPS daemon serves the agent's user only)"
        )
    percentage = raw.get("defaultActiveThreadPercentage")
    if percentage is not None and (
        isinstance(percentage, bool) or not isinstance(percentage, int) or not 1 <= percentage <= 100
    ):
        problems.append(f"{where}: defaultActiveThreadPercentage must be an integer from 1 to 100")
        percentage = None
    default = raw.get("defaultPinnedDeviceMemoryLimit")
    limit = (
        _bytes(default, f"{where}: defaultPinnedDeviceMemoryLimit", problems) if default is not None else None
    )
    per_device: dict[str, int] = {}
    per_raw = raw.get("defaultPerDevicePinnedMemoryLimit")
    if per_raw is not None and not isinstance(per_raw, Mapping):
        problems.append(f"{where}: defaultPerDevicePinnedMemoryLimit must map a device to a quantity")
    for key, value in (per_raw or {}).items() if isinstance(per_raw, Mapping) else ():
        amount = _bytes(value, f"{where}: defaultPerDevicePinnedMemoryLimit[{key}]", problems)
        if amount is not None:
            per_device[str(key)] = amount
    return MpsSettings(
        active_thread_percentage=percentage,
        pinned_memory_limit=limit,
        per_device_pinned_memory_limit=per_device,
    )


def _sharing(raw: Any, *, kind: str, where: str, problems: list[str]) -> Sharing:
    if raw is None:
        return Sharing(source=where)
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: sharing must be an object")
        return Sharing(source=where)
    unknown = sorted(set(raw) - {"strategy", "timeSlicingConfig", "mpsConfig"})
    if unknown:
        problems.append(f"{where}: unknown sharing fields {unknown}")
    strategy = raw.get("strategy")
    slicing, mps = raw.get("timeSlicingConfig"), raw.get("mpsConfig")
    if strategy == "MPS":
        if slicing is not None:
            problems.append(f"{where}: timeSlicingConfig is set but the strategy is MPS")
        return Sharing(strategy="MPS", mps=_mps(mps, where, problems), source=where)
    if strategy != "TimeSlicing":
        problems.append(f"{where}: unknown sharing strategy {strategy!r} (TimeSlicing or MPS)")
        return Sharing(source=where)
    if mps is not None:
        problems.append(f"{where}: mpsConfig is set but the strategy is TimeSlicing")
    if slicing is None:
        return Sharing(strategy="TimeSlicing", source=where)
    if kind == "MigDeviceConfig":
        problems.append(f"{where}: MIG devices take no timeSlicingConfig")
        return Sharing(strategy="TimeSlicing", source=where)
    if not isinstance(slicing, Mapping) or set(slicing) - {"interval"}:
        problems.append(f"{where}: timeSlicingConfig takes only `interval`")
        return Sharing(strategy="TimeSlicing", source=where)
    interval = slicing.get("interval") or "Default"
    if interval not in INTERVALS:
        problems.append(f"{where}: unknown time-slice interval {interval!r} ({', '.join(INTERVALS)})")
        interval = "Default"
    return Sharing(strategy="TimeSlicing", interval=str(interval), source=where)


def config_problems(
    driver: str, device_type: str, configs: Sequence[OpaqueConfig]
) -> tuple[list[str], Sharing]:
    """Every problem of `configs` for a device of `device_type` (`gpu` or `mig`), and the
    sharing of the config that applies (the last one)."""
    want = _KIND_FOR[device_type]
    problems: list[str] = []
    sharing = Sharing()
    for config in configs:
        params = config.parameters
        where = f"driver {driver}: {config.describe()}"
        api, kind = params.get("apiVersion"), params.get("kind")
        if api != NVIDIA_CONFIG_API_VERSION or kind not in _KIND_FOR.values():
            problems.append(
                f"{where}: unknown configuration kind {kind!r} of apiVersion {api!r}; expected "
                f"{want} of {NVIDIA_CONFIG_API_VERSION}"
            )
            continue
        if kind != want:
            problems.append(f"{where}: {kind} does not apply to a {device_type} device; use {want}")
            continue
        unknown = sorted(set(params) - {"apiVersion", "kind", "sharing"})
        if unknown:
            problems.append(f"{where}: unknown fields {unknown}")
        sharing = _sharing(params.get("sharing"), kind=str(kind), where=where, problems=problems)
    return problems, sharing


def sharing_of(driver: str, device_type: str, configs: Sequence[OpaqueConfig]) -> Sharing:
    """The sharing `configs` ask of a device; `DeviceConfigError` naming every problem."""
    problems, sharing = config_problems(driver, device_type, configs)
    if problems:
        raise DeviceConfigError("; ".join(problems))
    return sharing


def check_configs(driver: str, device_type: str, configs: Sequence[OpaqueConfig]) -> None:
    """Raise `DeviceConfigError` naming every problem of `configs` (none: they are valid)."""
    sharing_of(driver, device_type, configs)
