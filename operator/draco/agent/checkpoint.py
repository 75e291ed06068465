"""What the agent has prepared on a node, kept on disk so a restart knows it.

One small JSON file per claim (`<state-dir>/checkpoint/<claim uid>.json`, mode 0600), written
atomically (temporary file, fsync, rename, fsync of the folder): a crash leaves either
the old or the new record, never half of one, and a claim's change rewrites only its own
record, not every claim's. A claim is recorded as `PrepareStarted` *before* any file is
written, with every path it is going to write, so a crash in the middle leaves a record
that says what to clean up; it becomes `PrepareCompleted` once everything is on disk.
Unprepare removes the record (and fsyncs the folder). The files themselves are the truth
about a reboot: a completed record whose files are gone is prepared again (see `prepare`).

Agents before this layout kept every claim in one file, `<state-dir>/checkpoint.json`;
`load` reads it once, writes its records in the new layout, and removes it.

Records are written from the agent's prepare threads: the in-memory map is guarded by a
lock, and each claim is worked on by one thread at a time (the claim queue's promise).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from draco.errors import AgentError
from draco.runtime.files import PRIVATE_MODE, replace_file

__all__ = [
    "CHECKPOINT_VERSION",
    "PREPARE_COMPLETED",
    "PREPARE_STARTED",
    "Checkpoint",
    "ClaimRecord",
    "PreparedDevice",
    "write_atomically",
]

CHECKPOINT_VERSION: Final = 1
PREPARE_STARTED: Final = "PrepareStarted"
PREPARE_COMPLETED: Final = "PrepareCompleted"


@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device of a claim as this node prepared it."""

    driver: str
    pool: str
    device: str
    request: str
    share_id: str | None = None
    cdi_device_ids: tuple[str, ...] = ()
    #: What the driver could not make the runtime enforce (`ContainerEdits.notes`).
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str, str | None]:
        return (self.driver, self.pool, self.device, self.request, self.share_id)


@dataclass
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: str
    devices: list[PreparedDevice] = field(default_factory=list)
    #: Every file and folder prepare writes for this claim (removed on unprepare).
    files: list[str] = field(default_factory=list)
    #: KEP-5304 `metadata.generation` of the metadata files; grows on every rewrite.
    metadata_generation: int = 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["devices"] = [
            {**asdict(d), "cdi_device_ids": list(d.cdi_device_ids), "notes": list(d.notes)}
            for d in self.devices
        ]
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ClaimRecord:
        devices = [
            PreparedDevice(
                **{
                    **d,
                    "cdi_device_ids": tuple(d.get("cdi_device_ids", ())),
                    "notes": tuple(d.get("notes", ())),
                }
            )
            for d in raw.get("devices", [])
        ]
        return cls(
            uid=raw["uid"],
            namespace=raw["namespace"],
            name=raw["name"],
            state=raw["state"],
            devices=devices,
            files=list(raw.get("files", [])),
            metadata_generation=int(raw.get("metadata_generation", 0)),
        )


def write_atomically(path: Path, data: bytes, *, mode: int) -> None:
    """Replace `path` with `data` so that readers see the old or the new content only, with
    `mode` from before the rename (`draco.runtime.files`), and fsync its folder: the
    rename survives a crash."""
    replace_file(path, data, mode=mode)
    _fsync_dir(path.parent)


class Checkpoint:
    """The claims prepared on one node: loaded at start, one record written per change."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / "checkpoint"
        #: The single-file checkpoint of earlier agents, migrated by `load`.
        self.legacy_path = state_dir / "checkpoint.json"
        self.claims: dict[str, ClaimRecord] = {}
        self._lock = threading.Lock()

    def _path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid.startswith("."):
            raise AgentError(f"claim uid {uid!r} cannot name a checkpoint file")
        return self.directory / f"{uid}.json"

    def load(self) -> Checkpoint:
        claims: dict[str, ClaimRecord] = {}
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.json")):
                record = self._read_record(path)
                claims[record.uid] = record
        legacy = self._read_legacy()
        for uid, record in legacy.items():
            if uid not in claims:  # a per-claim record is newer than the old file
                self._write(record)
                claims[uid] = record
        if self.legacy_path.exists():
            self.legacy_path.unlink()
            _fsync_dir(self.legacy_path.parent)
        with self._lock:
            self.claims = claims
        return self

    def _read_record(self, path: Path) -> ClaimRecord:
        try:
            return ClaimRecord.from_json(_read_versioned(path)["claim"])
        except (KeyError, TypeError) as exc:
            raise AgentError(
                f"checkpoint record {path} is unreadable ({exc}); move it away to start from scratch "
                "(the claim is then prepared again)"
            ) from exc

    def _read_legacy(self) -> dict[str, ClaimRecord]:
        if not self.legacy_path.exists():
            return {}
        raw = _read_versioned(self.legacy_path)
        try:
            return {uid: ClaimRecord.from_json(rec) for uid, rec in raw.get("claims", {}).items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise AgentError(f"checkpoint {self.legacy_path} is unreadable ({exc})") from exc

    def _write(self, record: ClaimRecord) -> None:
        body = {"version": CHECKPOINT_VERSION, "claim": record.to_json()}
        # Owner-only: a record names the node's claims and what was prepared for them.
        write_atomically(
            self._path(record.uid), json.dumps(body, indent=1, sort_keys=True).encode(), mode=PRIVATE_MODE
        )

    def get(self, uid: str) -> ClaimRecord | None:
        with self._lock:
            return self.claims.get(uid)

    def uids(self) -> set[str]:
        """The uids of every recorded claim (a snapshot)."""
        with self._lock:
            return set(self.claims)

    def put(self, record: ClaimRecord) -> None:
        self._write(record)
        with self._lock:
            self.claims[record.uid] = record

    def remove(self, uid: str) -> None:
        with self._lock:
            known = self.claims.pop(uid, None) is not None
        if known:
            self._path(uid).unlink(missing_ok=True)
            _fsync_dir(self.directory)


def _read_versioned(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AgentError(
            f"checkpoint {path} is unreadable ({exc}); move it away to start from scratch "
            "(claims prepared before are then prepared again)"
        ) from exc
    if not isinstance(raw, dict) or raw.get("version") != CHECKPOINT_VERSION:
        version = raw.get("version") if isinstance(raw, dict) else None
        raise AgentError(f"checkpoint {path} has version {version!r}, expected {CHECKPOINT_VERSION}")
    return raw


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
