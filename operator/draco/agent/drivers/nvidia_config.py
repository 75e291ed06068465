"""NVIDIA's opaque device configs (`GpuConfig`, `MigDeviceConfig`): which ones draco honours.

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
            timeSlicingConfig: {interval: Default}

Draco honours what needs nothing done on the GPU: no `sharing`, or `TimeSlicing` with the
`Default` interval (or none) — the containers of one claim share the GPU the way CUDA
shares it by default. Everything else is refused with a reason saying why, and preparing
the claim fails with `InvalidDeviceConfig` (a claim condition and a Warning Event) instead
of a pod running on a GPU that is not set up as it asked: a time-slice interval other than
`Default` (draco does not change the GPU's compute policy), `MPS` (draco runs no MPS control
daemon), a `GpuConfig` on a MIG device or a `MigDeviceConfig` on a whole GPU, unknown kinds,
versions and fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from draco.agent.drivers.base import OpaqueConfig
from draco.errors import DeviceConfigError

__all__ = ["NVIDIA_CONFIG_API_VERSION", "check_configs"]

NVIDIA_CONFIG_API_VERSION: Final = "resource.nvidia.com/v1beta1"
_KIND_FOR: Final = {"gpu": "GpuConfig", "mig": "MigDeviceConfig"}
_INTERVALS: Final = ("Default", "Short", "Medium", "Long")


def _check_sharing(sharing: Any, *, kind: str, where: str) -> None:
    if sharing is None:
        return
    if not isinstance(sharing, Mapping):
        raise DeviceConfigError(f"{where}: sharing must be an object")
    unknown = sorted(set(sharing) - {"strategy", "timeSlicingConfig", "mpsConfig"})
    if unknown:
        raise DeviceConfigError(f"{where}: unknown sharing fields {unknown}")
    strategy = sharing.get("strategy")
    if strategy == "MPS":
        raise DeviceConfigError(
            f"{where}: sharing strategy MPS is not supported by draco (it runs no MPS control daemon); "
            "remove the config to share the device by time-slicing"
        )
    if strategy != "TimeSlicing":
        raise DeviceConfigError(f"{where}: unknown sharing strategy {strategy!r} (TimeSlicing or MPS)")
    if sharing.get("mpsConfig") is not None:
        raise DeviceConfigError(f"{where}: mpsConfig is set but the strategy is TimeSlicing")
    slicing = sharing.get("timeSlicingConfig")
    if slicing is None:
        return
    if kind == "MigDeviceConfig":
        raise DeviceConfigError(f"{where}: MIG devices take no timeSlicingConfig")
    if not isinstance(slicing, Mapping) or sorted(set(slicing) - {"interval"}):
        raise DeviceConfigError(f"{where}: timeSlicingConfig takes only `interval`")
    interval = slicing.get("interval")
    if interval is None or interval == "Default":
        return
    if interval in _INTERVALS:
        raise DeviceConfigError(
            f"{where}: time-slice interval {interval} is not supported by draco (it does not change "
            "the GPU's compute policy); use interval Default or leave timeSlicingConfig out"
        )
    raise DeviceConfigError(f"{where}: unknown time-slice interval {interval!r} ({', '.join(_INTERVALS)})")


def check_configs(driver: str, device_type: str, configs: Sequence[OpaqueConfig]) -> None:
    """Raise `DeviceConfigError` unless draco can honour every config of a device of
    `device_type` (`gpu` or `mig`)."""
    want = _KIND_FOR[device_type]
    for config in configs:
        params = config.parameters
        where = f"driver {driver}: {config.describe()}"
        api, kind = params.get("apiVersion"), params.get("kind")
        if api != NVIDIA_CONFIG_API_VERSION or kind not in _KIND_FOR.values():
            raise DeviceConfigError(
                f"{where}: unknown configuration kind {kind!r} of apiVersion {api!r}; expected "
                f"{want} of {NVIDIA_CONFIG_API_VERSION}"
            )
        if kind != want:
            raise DeviceConfigError(f"{where}: {kind} does not apply to a {device_type} device; use {want}")
        unknown = sorted(set(params) - {"apiVersion", "kind", "sharing"})
        if unknown:
            raise DeviceConfigError(f"{where}: unknown fields {unknown}")
        _check_sharing(params.get("sharing"), kind=kind, where=where)
