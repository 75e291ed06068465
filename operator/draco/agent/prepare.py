"""Prepare and unprepare the devices of one node's claims: CDI specs, metadata, checkpoint.

No API calls here, and only blocking file I/O: the agent calls `prepare` and `unprepare`
in a worker thread (never on its event loop), one thread per claim at a time; the caller
hands in the claim as the API returned it and turns the outcome into `status.devices`
entries. The rules that make prepare safe to call any
number of times, across restarts and reboots (the ones peer drivers have been
reported to get wrong: double prepare, lost files after a reboot, half-done unprepare):

- a claim whose checkpoint record is `PrepareCompleted` for the same devices and whose
  files are all on disk is left alone: calling prepare again changes nothing;
- a completed record whose files are gone (a reboot cleared `/var/run`) is prepared again,
  with the metadata generation bumped so readers notice;
- the record is written as `PrepareStarted`, with every path, *before* any file, so a crash
  half way leaves a record unprepare can clean up from;
- a claim fails as a whole: when one device cannot be prepared nothing stays on disk;
- each driver gets the opaque configuration the allocation carries for each device (class
  configs, then claim configs) and the device's share of the allocation; a configuration it
  rejects fails the claim with reason `InvalidDeviceConfig`, naming every refused config of
  every device at once;
- what a driver says it could not enforce (`ContainerEdits.notes`) is kept with the device
  in the checkpoint, so the claim's status says it after a restart too.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from draco.agent.cdi import CdiDevice, build_spec, cdi_device_name, cdi_kind, spec_path, write_spec
from draco.agent.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    ClaimRecord,
    PreparedDevice,
)
from draco.agent.drivers.base import Allocation, ContainerEdits, DeviceDriver, PrepareRequest, device_configs
from draco.agent.metadata import (
    MetadataDevice,
    build_metadata,
    container_path,
    host_claim_dir,
    host_path,
    metadata_mount,
    top_request,
    write_metadata,
)
from draco.api.constants import POD_CLAIM_NAME_ANNOTATION
from draco.errors import AgentError, DeviceConfigError
from draco.logs import get_logger

__all__ = [
    "INVALID_CONFIG_REASON",
    "PREPARE_FAILED_REASON",
    "DeviceOutcome",
    "NodePreparer",
    "PrepareOutcome",
    "allocation_config",
    "claim_results",
]

#: Condition reasons of a failed prepare.
PREPARE_FAILED_REASON = "PrepareFailed"
INVALID_CONFIG_REASON = "InvalidDeviceConfig"

log = get_logger(__name__)


@dataclass(frozen=True)
class DeviceOutcome:
    """One allocated device after prepare: its result entry, CDI IDs, or why it failed."""

    result: Mapping[str, Any]
    cdi_device_ids: tuple[str, ...] = ()
    error: str | None = None
    #: Why it failed, as a condition reason.
    reason: str = PREPARE_FAILED_REASON
    #: What the driver could not make the runtime enforce.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrepareOutcome:
    devices: Sequence[DeviceOutcome]
    #: True when files were (re)written: a first prepare or a repair after a reboot.
    wrote: bool = False

    @property
    def ok(self) -> bool:
        return all(d.error is None for d in self.devices)


def claim_results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`status.allocation.devices.results` of a claim, [] when not allocated."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def allocation_config(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`status.allocation.devices.config` of a claim (class and claim configs), [] when none."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("config") or [])


@dataclass
class NodePreparer:
    """The prepared claims of one node (one pool per driver, named after the node)."""

    node: str
    cdi_dir: Path
    state_dir: Path
    drivers: Mapping[str, DeviceDriver]
    checkpoint: Checkpoint = field(init=False)

    def __post_init__(self) -> None:
        self.checkpoint = Checkpoint(self.state_dir).load()

    # ---- which claims are ours

    def my_results(self, claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The results allocated from this node's pools of this agent's drivers."""
        return [
            r for r in claim_results(claim) if r.get("driver") in self.drivers and r.get("pool") == self.node
        ]

    def prepared_uids(self) -> set[str]:
        return self.checkpoint.uids()

    # ---- prepare

    def _cdi_ids(self, uid: str, result: Mapping[str, Any]) -> tuple[str, ...]:
        driver = self.drivers[str(result["driver"])]
        kind = cdi_kind(driver.name, driver.cdi_class)
        return (
            f"{kind}={cdi_device_name(uid, str(result['device']), str(result.get('shareID') or ''))}",
            f"{kind}={cdi_device_name(uid, 'metadata', top_request(str(result['request'])))}",
        )

    def _wanted(self, uid: str, results: Sequence[Mapping[str, Any]]) -> list[PreparedDevice]:
        return [
            PreparedDevice(
                driver=str(r["driver"]),
                pool=str(r["pool"]),
                device=str(r["device"]),
                request=str(r["request"]),
                share_id=r.get("shareID"),
                cdi_device_ids=self._cdi_ids(uid, r),
            )
            for r in results
        ]

    def _planned_files(
        self, *, namespace: str, name: str, uid: str, wanted: Sequence[PreparedDevice]
    ) -> list[str]:
        files: list[str] = []
        for driver in sorted({d.driver for d in wanted}):
            files.append(str(spec_path(self.cdi_dir, driver=driver, claim_uid=uid)))
            for request in sorted({top_request(d.request) for d in wanted if d.driver == driver}):
                files.append(
                    str(
                        host_path(
                            self.state_dir,
                            driver=driver,
                            namespace=namespace,
                            claim_name=name,
                            request=request,
                        )
                    )
                )
            files.append(
                str(host_claim_dir(self.state_dir, driver=driver, namespace=namespace, claim_name=name))
            )
        return files

    @staticmethod
    def _files_present(record: ClaimRecord) -> bool:
        return all(Path(f).exists() for f in record.files)

    def prepare(self, claim: Mapping[str, Any]) -> PrepareOutcome:
        """Prepare this node's devices of `claim`; idempotent (see the module docstring)."""
        meta = claim["metadata"]
        uid, namespace, name = str(meta["uid"]), str(meta["namespace"]), str(meta["name"])
        results = self.my_results(claim)
        wanted = self._wanted(uid, results)
        record = self.checkpoint.get(uid)
        if (
            record is not None
            and record.state == PREPARE_COMPLETED
            and [d.key for d in record.devices] == [d.key for d in wanted]
            and self._files_present(record)
        ):
            return PrepareOutcome(
                devices=[
                    DeviceOutcome(r, d.cdi_device_ids, notes=d.notes)
                    for r, d in zip(results, record.devices, strict=True)
                ]
            )
        if record is not None:
            if record.state == PREPARE_COMPLETED and [d.key for d in record.devices] == [
                d.key for d in wanted
            ]:
                log.warning(
                    "Prepared claim lost its files; preparing again",
                    claim=f"{namespace}/{name}",
                    node=self.node,
                )
            self._release(record)
            self._remove_files(record)
        generation = (record.metadata_generation if record else 0) + 1
        record = ClaimRecord(
            uid=uid,
            namespace=namespace,
            name=name,
            state=PREPARE_STARTED,
            devices=wanted,
            files=self._planned_files(namespace=namespace, name=name, uid=uid, wanted=wanted),
            metadata_generation=generation,
        )
        self.checkpoint.put(record)
        pod_claim_name = (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
        try:
            notes = self._write(
                record, results=results, configs=allocation_config(claim), pod_claim_name=pod_claim_name
            )
        except (AgentError, OSError) as exc:
            self._release(record)
            self._remove_files(record)
            self.checkpoint.remove(uid)
            message = str(exc) if isinstance(exc, AgentError) else f"cannot write on the node: {exc}"
            reason = INVALID_CONFIG_REASON if isinstance(exc, DeviceConfigError) else PREPARE_FAILED_REASON
            return PrepareOutcome(
                devices=[DeviceOutcome(r, error=message, reason=reason) for r in results], wrote=False
            )
        record.state = PREPARE_COMPLETED
        record.devices = [replace(d, notes=n) for d, n in zip(record.devices, notes, strict=True)]
        self.checkpoint.put(record)
        return PrepareOutcome(
            devices=[
                DeviceOutcome(r, d.cdi_device_ids, notes=d.notes)
                for r, d in zip(results, record.devices, strict=True)
            ],
            wrote=True,
        )

    def _write(
        self,
        record: ClaimRecord,
        *,
        results: Sequence[Mapping[str, Any]],
        configs: Sequence[Mapping[str, Any]],
        pod_claim_name: str | None,
    ) -> list[tuple[str, ...]]:
        """Compute everything first (driver errors surface before any write), then write;
        returns each device's notes, in the order of `record.devices`."""
        by_driver: dict[str, list[tuple[int, Mapping[str, Any], PreparedDevice]]] = defaultdict(list)
        for position, (result, prepared) in enumerate(zip(results, record.devices, strict=True)):
            by_driver[prepared.driver].append((position, result, prepared))
        notes: list[tuple[str, ...]] = [() for _ in record.devices]
        refused: list[str] = []
        writes: list[tuple[str, Path, dict[str, Any]]] = []
        for driver_name, entries in sorted(by_driver.items()):
            driver = self.drivers[driver_name]
            inventory = driver.inventory(self.node)
            cdi_devices: list[CdiDevice] = []
            requests: dict[str, dict[str, list[MetadataDevice]]] = defaultdict(dict)
            wanted: list[PrepareRequest] = []
            for _position, result, prepared in entries:
                device = inventory.device(prepared.device)
                if device is None:
                    raise AgentError(
                        f"device {prepared.device} of driver {driver_name} is not published on node {self.node}"
                    )
                wanted.append(
                    PrepareRequest(
                        device=device,
                        configs=device_configs(configs, driver=driver_name, request=prepared.request),
                        allocation=Allocation.of(record.uid, result),
                    )
                )
            try:
                all_edits = driver.prepare_devices(self.node, wanted)
            except DeviceConfigError as exc:  # every driver's refusals, together
                refused.append(str(exc))
                continue
            for (position, _result, prepared), want, edits in zip(entries, wanted, all_edits, strict=True):
                device = want.device
                notes[position] = edits.notes
                cdi_devices.append(CdiDevice(name=prepared.cdi_device_ids[0].split("=", 1)[1], edits=edits))
                requests[top_request(prepared.request)].setdefault(prepared.request, []).append(
                    MetadataDevice(
                        driver=driver_name, pool=prepared.pool, name=device.name, attributes=device.attributes
                    )
                )
            for top, by_full in sorted(requests.items()):
                host = host_path(
                    self.state_dir,
                    driver=driver_name,
                    namespace=record.namespace,
                    claim_name=record.name,
                    request=top,
                )
                body = build_metadata(
                    namespace=record.namespace,
                    claim_name=record.name,
                    claim_uid=record.uid,
                    pod_claim_name=pod_claim_name,
                    generation=record.metadata_generation,
                    requests=by_full,
                )
                writes.append(("metadata", host, body))
                target = container_path(
                    claim_name=record.name, pod_claim_name=pod_claim_name, request=top, driver=driver_name
                )
                cdi_devices.append(
                    CdiDevice(
                        name=cdi_device_name(record.uid, "metadata", top),
                        edits=ContainerEdits(mounts=(metadata_mount(host=host, container=target),)),
                    )
                )
            spec = build_spec(
                kind=cdi_kind(driver_name, driver.cdi_class),
                devices=cdi_devices,
                claim=f"{record.namespace}/{record.name}",
            )
            writes.append(("cdi", spec_path(self.cdi_dir, driver=driver_name, claim_uid=record.uid), spec))
        if refused:
            raise DeviceConfigError("; ".join(refused))
        # Metadata before CDI specs: a runtime that sees the spec finds the files it mounts.
        for what, path, body in sorted(writes, key=lambda w: w[0] != "metadata"):
            if what == "metadata":
                write_metadata(path, body)
            else:
                write_spec(path, body)
        return notes

    # ---- unprepare

    @staticmethod
    def _remove_files(record: ClaimRecord) -> None:
        for name in record.files:
            path = Path(name)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _release(self, record: ClaimRecord) -> None:
        """What the drivers set up for the claim beyond its files (an MPS daemon)."""
        for name in sorted({d.driver for d in record.devices}):
            driver = self.drivers.get(name)
            if driver is not None:
                driver.unprepare_claim(self.node, record.uid)

    def unprepare(self, uid: str) -> bool:
        """Remove everything prepared for claim `uid`; False when nothing was prepared."""
        record = self.checkpoint.get(uid)
        if record is None:
            return False
        self._release(record)
        self._remove_files(record)
        self.checkpoint.remove(uid)
        return True
