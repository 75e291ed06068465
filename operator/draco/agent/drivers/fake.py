"""Fake devices from a YAML file: for tests, demos and simulating many nodes at once.

The file describes one or more drivers; every simulated node gets the same devices
(unless `unhealthy` names `<node>/<device>`). The file is re-read when it changes, so a
test can mark a device unhealthy, add a device or change an attribute by editing it::

    drivers:
    - name: gpu.draco.dev            # the DRA driver name
      cdiClass: gpu                  # CDI kind gpu.draco.dev/gpu
      bindingConditions: true        # devices declare draco.dev/prepared
      taintEffect: NoExecute         # of the health taint (NoSchedule: keep pods, refuse new claims)
      sharedCounters:
      - name: gpu-counters
        counters: {memory: 320Gi}
      partitionTypeAttribute: profile  # the attribute naming a partition's type (sharedCounters)
      devices:
      - name: gpu-{index}            # `count` stamps out gpu-0 ... gpu-7
        count: 8
        attributes:
          model: A100                # shorthand: str -> string, int -> int, bool -> bool
          index: {int: "{index}"}    # explicit type; strings are formatted with {index}
          driverVersion: {version: 550.54.15}
        capacity: {memory: 40Gi}
        env: {GPU_MODE: fast}        # container env vars (CDI)
        deviceNodes: [/dev/null]
        healthy: true                # false: the taint draco.dev/unhealthy (effect: taintEffect)
        allowMultipleAllocations: false  # true: shared by claims, capacity consumed per share
        failPrepare: ""              # non-empty: preparing this device fails with that message
        failPrepareRate: 0.0         # 0-1: preparing it fails at random this often (fault injection)
      unhealthy: [node-1/gpu-3]      # unhealthy on one node only (or every node: gpu-3)
      failPrepareSeed: 7             # seeds the draws of failPrepareRate (default: random)

A file with a single driver may leave out `drivers:` and put its keys at the top level.

Claims and device classes configure fake devices with opaque parameters of this shape
(every driver of the file accepts it); the variables reach the container's environment,
after the device's own, claim configs overriding class configs::

    config:
    - opaque:
        driver: gpu.draco.dev
        parameters:
          apiVersion: fake.draco.dev/v1alpha1
          kind: FakeDeviceConfig
          env: {GPU_MODE: slow, BATCH: "4"}

Any other kind, apiVersion or field fails prepare with a `DeviceConfigError`.

A shared device (`allowMultipleAllocations: true`, its capacity with a `requestPolicy` as
in the API) is a GPU shared by memory the way the NVIDIA driver publishes one
(`--nvidia-shares`)::

      - name: gpu-0
        allowMultipleAllocations: true
        capacity:
          memory:
            value: 80Gi
            requestPolicy: {default: 80Gi, validRange: {min: 1Mi, step: 1Mi}}

Each share prepared gets `DRACO_FAKE_<DEVICE>_SHARE=<shareID>` and, per consumed capacity,
`DRACO_FAKE_<DEVICE>_<CAPACITY>=<amount>` in its environment, and the note that a fake
device enforces none of it (in the claim's status, as the NVIDIA driver says what it
cannot enforce).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from draco.agent.drivers.base import (
    BINDING_CONDITION,
    BINDING_FAILURE_CONDITION,
    Allocation,
    ContainerEdits,
    Device,
    DeviceDriver,
    DeviceNode,
    Inventory,
    Mount,
    OpaqueConfig,
)
from draco.agent.health import HEALTH_TAINT_EFFECTS, unhealthy_taint
from draco.api.constants import TAINT_EFFECT_NO_EXECUTE
from draco.errors import AgentError, DeviceConfigError
from draco.logs import get_logger

__all__ = [
    "FAKE_CONFIG_API_VERSION",
    "FAKE_CONFIG_KIND",
    "FakeConfig",
    "FakeDriver",
    "FakeDriverSpec",
    "config_env",
    "load_fake_drivers",
    "parse_fake_config",
]

log = get_logger(__name__)

_ATTRIBUTE_TYPES = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_ENV_UNSAFE = re.compile(r"[^A-Z0-9_]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

FAKE_CONFIG_API_VERSION = "fake.draco.dev/v1alpha1"
FAKE_CONFIG_KIND = "FakeDeviceConfig"
_CONFIG_FIELDS = frozenset({"apiVersion", "kind", "env"})


@dataclass(frozen=True)
class FakeDeviceSpec:
    """One device of the file after `count` expansion."""

    device: Device
    env: tuple[str, ...]
    device_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]
    fail_prepare: str
    healthy: bool
    #: The chance, 0 to 1, that one prepare of this device fails on purpose (`failPrepareRate`).
    fail_prepare_rate: float = 0.0


@dataclass(frozen=True)
class FakeDriverSpec:
    """One driver of the file."""

    name: str
    cdi_class: str
    binding_conditions: bool
    devices: tuple[FakeDeviceSpec, ...]
    shared_counters: tuple[Mapping[str, Any], ...]
    #: `<node>/<device>` (that node only) or `<device>` (every node).
    unhealthy: frozenset[str] = field(default_factory=frozenset)
    #: Seeds the draws of `failPrepareRate` (None: a random seed).
    fail_prepare_seed: int | None = None
    #: The effect of the health taint of an unhealthy device.
    taint_effect: str = TAINT_EFFECT_NO_EXECUTE
    #: The attribute naming a partition's type (qualified with the driver when bare).
    partition_type_attribute: str | None = None


@dataclass(frozen=True)
class FakeConfig:
    drivers: tuple[FakeDriverSpec, ...]


def _fail(path: str, detail: str) -> AgentError:
    return AgentError(f"fake device file: {path}: {detail}")


def _fmt(value: Any, index: int | None) -> Any:
    if isinstance(value, str) and index is not None:
        return value.replace("{index}", str(index))
    return value


def _attribute(path: str, value: Any, index: int | None) -> dict[str, Any]:
    if isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in _ATTRIBUTE_TYPES:
            raise _fail(path, f"an attribute is a value or one of {{{', '.join(_ATTRIBUTE_TYPES)}}}")
        kind, raw = next(iter(value.items()))
        raw = [_fmt(v, index) for v in raw] if isinstance(raw, list) else _fmt(raw, index)
        try:
            if kind == "int" and not isinstance(raw, list):
                raw = int(raw)
            elif kind == "ints":
                raw = [int(v) for v in raw]
            elif kind in ("string", "version"):
                raw = str(raw)
        except (TypeError, ValueError) as exc:
            raise _fail(path, f"{kind} attribute {raw!r} is not a {kind}") from exc
        return {kind: raw}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": _fmt(value, index)}
    raise _fail(path, f"unsupported attribute value {value!r}")


def _quantity(path: str, value: Any, index: int | None) -> dict[str, Any]:
    if isinstance(value, Mapping):
        if "value" not in value:
            raise _fail(path, "a capacity needs `value`")
        return {k: _fmt(v, index) for k, v in value.items()}
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return {"value": _fmt(value, index)}
    raise _fail(path, f"unsupported quantity {value!r}")


def _counters(path: str, raw: Any, index: int | None) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or not raw:
        raise _fail(path, "counters is a non-empty map of name to quantity")
    return {str(k): _quantity(f"{path}.{k}", v, index) for k, v in raw.items()}


def _env_name(name: str) -> str:
    return _ENV_UNSAFE.sub("_", name.upper())


def _device_specs(path: str, raw: Mapping[str, Any], *, binding_conditions: bool) -> list[FakeDeviceSpec]:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(path, "every device needs a `name`")
    count = raw.get("count")
    if count is not None and (not isinstance(count, int) or count < 0):
        raise _fail(f"{path}.count", "must be a non-negative integer")
    if count is not None and "{index}" not in name:
        raise _fail(f"{path}.name", "a device with `count` needs `{index}` in its name")
    indices: Sequence[int | None] = range(count) if count is not None else [None]
    rate = raw.get("failPrepareRate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise _fail(f"{path}.failPrepareRate", "must be a number from 0 to 1")
    out = []
    for index in indices:
        dev_name = _fmt(name, index)
        attrs = {
            str(k): _attribute(f"{path}.attributes.{k}", v, index)
            for k, v in (raw.get("attributes") or {}).items()
        }
        capacity = {
            str(k): _quantity(f"{path}.capacity.{k}", v, index)
            for k, v in (raw.get("capacity") or {}).items()
        }
        consumes = [
            {
                "counterSet": _fmt(c["counterSet"], index),
                "counters": _counters(f"{path}.consumesCounters", c.get("counters"), index),
            }
            for c in raw.get("consumesCounters") or []
        ]
        healthy = bool(raw.get("healthy", True))
        taints = [dict(t) for t in raw.get("taints") or []]
        env_raw = raw.get("env")
        env = (
            tuple(f"{k}={_fmt(v, index)}" for k, v in env_raw.items()) if isinstance(env_raw, Mapping) else ()
        )
        if not env:
            env = (f"DRACO_FAKE_DEVICE_{_env_name(dev_name)}={dev_name}",)
        nodes = tuple(
            DeviceNode(path=_fmt(n, index))
            if isinstance(n, str)
            else DeviceNode(
                path=_fmt(n["path"], index), host_path=n.get("hostPath"), permissions=n.get("permissions")
            )
            for n in raw.get("deviceNodes") or []
        )
        mounts = tuple(
            Mount(
                host_path=_fmt(m["hostPath"], index),
                container_path=_fmt(m["containerPath"], index),
                options=tuple(m.get("options", ("ro", "bind"))),
            )
            for m in raw.get("mounts") or []
        )
        device = Device(
            name=dev_name,
            attributes=attrs,
            capacity=capacity,
            consumes_counters=consumes,
            taints=taints,
            binding_conditions=(BINDING_CONDITION,) if binding_conditions else (),
            binding_failure_conditions=(BINDING_FAILURE_CONDITION,) if binding_conditions else (),
            allow_multiple_allocations=bool(raw.get("allowMultipleAllocations", False)),
        )
        out.append(
            FakeDeviceSpec(
                device=device,
                env=env,
                device_nodes=nodes,
                mounts=mounts,
                fail_prepare=str(raw.get("failPrepare") or ""),
                healthy=healthy,
                fail_prepare_rate=rate,
            )
        )
    return out


def _driver_spec(path: str, raw: Mapping[str, Any], *, binding_conditions: bool) -> FakeDriverSpec:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(path, "every driver needs a `name` (the DRA driver name, e.g. gpu.draco.dev)")
    with_conditions = bool(raw.get("bindingConditions", binding_conditions))
    devices: list[FakeDeviceSpec] = []
    for i, dev in enumerate(raw.get("devices") or []):
        if not isinstance(dev, Mapping):
            raise _fail(f"{path}.devices[{i}]", "a device is a map")
        devices.extend(_device_specs(f"{path}.devices[{i}]", dev, binding_conditions=with_conditions))
    names = [d.device.name for d in devices]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise _fail(f"{path}.devices", f"duplicate device names {dupes}")
    counters = tuple(
        {
            "name": str(c["name"]),
            "counters": _counters(f"{path}.sharedCounters[{i}]", c.get("counters"), None),
        }
        for i, c in enumerate(raw.get("sharedCounters") or [])
    )
    seed = raw.get("failPrepareSeed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _fail(f"{path}.failPrepareSeed", "must be an integer")
    effect = str(raw.get("taintEffect", TAINT_EFFECT_NO_EXECUTE))
    if effect not in HEALTH_TAINT_EFFECTS:
        raise _fail(f"{path}.taintEffect", f"must be one of {', '.join(HEALTH_TAINT_EFFECTS)}")
    return FakeDriverSpec(
        name=name,
        cdi_class=str(raw.get("cdiClass", "device")),
        binding_conditions=with_conditions,
        devices=tuple(devices),
        shared_counters=counters,
        unhealthy=frozenset(str(u) for u in raw.get("unhealthy") or []),
        fail_prepare_seed=seed,
        taint_effect=effect,
        partition_type_attribute=_qualified(name, raw.get("partitionTypeAttribute")),
    )


def _qualified(driver: str, attribute: object) -> str | None:
    if not attribute:
        return None
    return str(attribute) if "/" in str(attribute) else f"{driver}/{attribute}"


def config_env(driver: str, configs: Sequence[OpaqueConfig]) -> dict[str, str]:
    """The environment variables `configs` set, later configs overriding earlier ones;
    raises `DeviceConfigError` naming every config that is wrong and what is wrong with it."""
    env: dict[str, str] = {}
    problems: list[str] = []
    for config in configs:
        params = config.parameters
        where = f"driver {driver}: {config.describe()}"
        kind, api = params.get("kind"), params.get("apiVersion")
        if (api, kind) != (FAKE_CONFIG_API_VERSION, FAKE_CONFIG_KIND):
            problems.append(
                f"{where}: unknown configuration kind {kind!r} of apiVersion {api!r}; "
                f"expected kind {FAKE_CONFIG_KIND} of apiVersion {FAKE_CONFIG_API_VERSION}"
            )
            continue
        unknown = sorted(set(params) - _CONFIG_FIELDS)
        if unknown:
            problems.append(f"{where}: unknown field(s) {', '.join(unknown)} (known: env)")
        raw = params.get("env") or {}
        if not isinstance(raw, Mapping):
            problems.append(f"{where}: env must be a map of variable name to value")
            continue
        for name, value in raw.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                problems.append(f"{where}: env: {name!r} is not a variable name")
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                problems.append(f"{where}: env.{name}: the value must be a string or a number")
            else:
                env[name] = str(value)
    if problems:
        raise DeviceConfigError("; ".join(problems))
    return env


def parse_fake_config(text: str, *, source: str = "<string>", binding_conditions: bool = False) -> FakeConfig:
    """Parse the YAML of a fake device file; raises `AgentError` naming what is wrong.

    `binding_conditions` is the default for drivers that do not say (`--binding-conditions`).
    """
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AgentError(f"fake device file {source}: not YAML: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise AgentError(f"fake device file {source}: expected a map with `drivers:` or a driver's `name:`")
    entries = raw.get("drivers", [raw])
    if not isinstance(entries, list) or not entries:
        raise AgentError(f"fake device file {source}: `drivers` is a non-empty list")
    try:
        specs = tuple(
            _driver_spec(f"{source}: drivers[{i}]", e, binding_conditions=binding_conditions)
            for i, e in enumerate(entries)
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise AgentError(f"fake device file {source}: malformed entry ({exc!r})") from exc
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise AgentError(f"fake device file {source}: a driver name appears twice")
    return FakeConfig(drivers=specs)


class FakeDriver(DeviceDriver):
    """One driver of a fake device file; `FakeFileWatcher` swaps in new specs on change."""

    def __init__(self, spec: FakeDriverSpec) -> None:
        self.name = spec.name
        self.spec = spec
        self._draws = random.Random(spec.fail_prepare_seed)

    @property
    def cdi_class(self) -> str:  # type: ignore[override]
        return self.spec.cdi_class

    def _healthy(self, node: str, item: FakeDeviceSpec) -> bool:
        name = item.device.name
        return (
            item.healthy and name not in self.spec.unhealthy and f"{node}/{name}" not in self.spec.unhealthy
        )

    def inventory(self, node: str) -> Inventory:
        devices = []
        for item in self.spec.devices:
            device = item.device
            if not self._healthy(node, item):
                taint = unhealthy_taint("marked-unhealthy", effect=self.spec.taint_effect)
                device = replace(device, taints=[*device.taints, taint])
            devices.append(device)
        return Inventory(
            devices=devices,
            shared_counters=self.spec.shared_counters,
            partition_type_attribute=self.spec.partition_type_attribute,
        )

    def prepare_device(
        self,
        node: str,
        device: Device,
        *,
        configs: Sequence[OpaqueConfig] = (),
        allocation: Allocation | None = None,
    ) -> ContainerEdits:
        extra = config_env(self.name, configs)
        item = next((d for d in self.spec.devices if d.device.name == device.name), None)
        if item is None:
            raise AgentError(
                f"device {device.name} of driver {self.name} is not in the fake device file any more"
            )
        if item.fail_prepare:
            raise AgentError(f"device {device.name}: {item.fail_prepare}")
        if item.fail_prepare_rate and self._draws.random() < item.fail_prepare_rate:
            log.warning("Injected prepare failure", driver=self.name, node=node, device=device.name)
            raise AgentError(
                f"device {device.name}: injected failure (failPrepareRate {item.fail_prepare_rate})"
            )
        env = dict(e.split("=", 1) for e in item.env)
        env.update(extra)
        notes: tuple[str, ...] = ()
        if allocation is not None and allocation.share_id:
            prefix = f"DRACO_FAKE_{_env_name(device.name)}"
            env[f"{prefix}_SHARE"] = allocation.share_id
            consumed = sorted(allocation.consumed_capacity.items())
            for name, amount in consumed:
                env[f"{prefix}_{_env_name(name)}"] = amount
            if consumed:
                what = ", ".join(f"{name} {amount}" for name, amount in consumed)
                notes = (f"share of {what} is not enforced: a fake device limits nothing",)
        return ContainerEdits(
            env=tuple(f"{k}={v}" for k, v in env.items()),
            device_nodes=item.device_nodes,
            mounts=item.mounts,
            notes=notes,
        )


@dataclass
class FakeFileWatcher:
    """Re-reads the file when its modification time, size or inode changes and hands the
    new specs to the drivers it made. A broken edit is logged and ignored: the last good
    devices stay published rather than vanishing because of a typo."""

    path: Path
    drivers: list[FakeDriver]
    binding_conditions: bool = False
    interval: float = 0.5
    _stamp: tuple[int, int, int] | None = None

    def stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def reload(self) -> bool:
        """Re-read the file if it changed; True when the drivers got new specs."""
        stamp = self.stamp()
        if stamp is None or stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            config = parse_fake_config(
                self.path.read_text(), source=str(self.path), binding_conditions=self.binding_conditions
            )
        except (AgentError, OSError) as exc:
            log.warning("Ignoring a broken fake device file", path=str(self.path), error=str(exc))
            return False
        by_name = {s.name: s for s in config.drivers}
        for driver in self.drivers:
            spec = by_name.get(driver.name)
            if spec is None:
                log.warning("Driver left the fake device file; keeping its devices", driver=driver.name)
                continue
            driver.spec = spec
        log.info("Reloaded fake device file", path=str(self.path))
        return True

    async def run(self, notify: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self.reload():
                notify()


def load_fake_drivers(
    path: Path, *, binding_conditions: bool = False, interval: float = 0.5
) -> tuple[list[FakeDriver], FakeFileWatcher]:
    """The drivers of a fake device file and the watcher that keeps them current."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise AgentError(
            f"cannot read fake device file {path}: {exc.strerror}; pass it with --config"
        ) from exc
    config = parse_fake_config(text, source=str(path), binding_conditions=binding_conditions)
    drivers = [FakeDriver(spec) for spec in config.drivers]
    watcher = FakeFileWatcher(
        path=path, drivers=drivers, binding_conditions=binding_conditions, interval=interval
    )
    watcher._stamp = watcher.stamp()
    return drivers, watcher
