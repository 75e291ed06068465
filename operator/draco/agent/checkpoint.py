"""What the agent has prepared on a node, kept on disk so a restart knows it.

One JSON file per node (`<state-dir>/checkpoint.json`), rewritten atomically (temporary
file, fsync, rename, fsync of the folder): a crash leaves either the old or the new file,
never half of one. A claim is recorded as `PrepareStarted` *before* any file is written,
with every path it is going to write, so a crash in the middle leaves a record that says
what to clean up; it becomes `PrepareCompleted` once everything is on disk. The files
themselves are the truth about a reboot: a completed record whose files are gone is
prepared again (see `prepare`).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from draco.errors import AgentError

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
        out["devices"] = [{**asdict(d), "cdi_device_ids": list(d.cdi_device_ids)} for d in self.devices]
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ClaimRecord:
        devices = [
            PreparedDevice(**{**d, "cdi_device_ids": tuple(d.get("cdi_device_ids", ()))})
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


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that readers see the old or the new content only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class Checkpoint:
    """The claims prepared on one node, loaded at start and saved on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, ClaimRecord] = {}

    def load(self) -> Checkpoint:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return self
        except (OSError, ValueError) as exc:
            raise AgentError(
                f"checkpoint {self.path} is unreadable ({exc}); move it away to start from scratch "
                "(claims prepared before are then prepared again)"
            ) from exc
        if raw.get("version") != CHECKPOINT_VERSION:
            raise AgentError(
                f"checkpoint {self.path} has version {raw.get('version')!r}, expected {CHECKPOINT_VERSION}"
            )
        self.claims = {uid: ClaimRecord.from_json(rec) for uid, rec in raw.get("claims", {}).items()}
        return self

    def save(self) -> None:
        body = {
            "version": CHECKPOINT_VERSION,
            "claims": {uid: r.to_json() for uid, r in sorted(self.claims.items())},
        }
        write_atomically(self.path, json.dumps(body, indent=1, sort_keys=True).encode())

    def get(self, uid: str) -> ClaimRecord | None:
        return self.claims.get(uid)

    def put(self, record: ClaimRecord) -> None:
        self.claims[record.uid] = record
        self.save()

    def remove(self, uid: str) -> None:
        if self.claims.pop(uid, None) is not None:
            self.save()
