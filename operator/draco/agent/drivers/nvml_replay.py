"""A stand-in for the `pynvml` module that answers from a recording of a real GPU.

`draco agent --driver nvidia --nvml-replay FILE` (and the unit tests) run the whole
NVIDIA driver on it without a GPU. A recording is JSON: `{"calls": {KEY: ANSWER}}` where
ANSWER is `{"ok": true, "value": ...}` or `{"ok": false, "value": "NVMLError_NotSupported:
..."}` (the error is raised as that class). Several files can be given: later ones add
calls the first did not record (placements, MIG devices). KEY says which call:

- `nvmlSystemGetDriverVersion`, `nvmlDeviceGetCount`, ... for calls without a device;
- `[0] nvmlDeviceGetName` for GPU 0, with arguments where the call has them:
  `[0] nvmlDeviceGetGpuInstanceProfileInfo(profile=7)`,
  `[0] nvmlDeviceGetGpuInstancePossiblePlacements(profileId=19)` (a list of
  `{"start", "size"}`), `[0] nvmlDeviceGetMigDeviceHandleByIndex(2)`,
  `[0] nvmlDeviceGetGpuInstanceById(3)`;
- `[0/2] nvmlDeviceGetUUID` for MIG device 2 of GPU 0, `[0 gi 3] nvmlGpuInstanceGetInfo`
  for GPU instance 3 of GPU 0;
- `nvmlEventSetWait_v2...` for the answer when no event is pending (a timeout).

A recording may also carry the host files that go with the answers (`{"files":
{"/proc/driver/nvidia-caps/mig-minors": "..."}}`); the driver reads those from the
recording instead of the host (`host_files`).

A call the recording does not have raises `ReplayGapError`, which is not an `NVMLError`:
the driver cannot mistake a gap for "not supported", a test fails instead. Dict answers
come back as attribute objects (`info.memorySizeMB`), the way pynvml's structs read.

Calls that change the GPU (`nvmlDeviceSetComputeMode`) are answered from the recording
when it has them (`[0] nvmlDeviceSetComputeMode(3)`) and otherwise refused with
`NVMLError_NotSupported`: a replay changes no GPU. Each is kept in `writes`.

Tests drive health through `inject_xid` and `lose`.
"""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

from draco.errors import AgentError

__all__ = ["NVMLError", "ReplayGapError", "ReplayNvml"]


class NVMLError(Exception):
    """The base of NVML errors, as `pynvml.NVMLError`."""


class ReplayGapError(LookupError):
    """The driver made a call the recording does not answer."""


_ERROR_NAMES: Final = (
    "NotSupported",
    "InvalidArgument",
    "NotFound",
    "NoPermission",
    "Timeout",
    "GpuIsLost",
    "Unknown",
    "Uninitialized",
    "DriverNotLoaded",
)
_ERRORS: Final[dict[str, type[NVMLError]]] = {
    f"NVMLError_{n}": type(f"NVMLError_{n}", (NVMLError,), {}) for n in _ERROR_NAMES
}


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):  # pynvml's name
    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


def _attrs(value: Any) -> Any:
    if isinstance(value, Mapping):
        return SimpleNamespace(**{k: _attrs(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_attrs(v) for v in value]
    return value


class Handle:
    """A device, MIG device or GPU-instance handle: the key prefix of its calls."""

    def __init__(self, key: str, gpu: int) -> None:
        self.key = key
        self.gpu = gpu

    def __repr__(self) -> str:
        return f"Handle({self.key})"


class ReplayNvml:
    """The pynvml functions the NVIDIA driver calls, answered from a recording."""

    NVMLError = NVMLError
    NVMLError_NotSupported = _ERRORS["NVMLError_NotSupported"]
    NVMLError_InvalidArgument = _ERRORS["NVMLError_InvalidArgument"]
    NVMLError_NotFound = _ERRORS["NVMLError_NotFound"]
    NVMLError_NoPermission = _ERRORS["NVMLError_NoPermission"]
    NVMLError_Timeout = _ERRORS["NVMLError_Timeout"]
    NVMLError_GpuIsLost = _ERRORS["NVMLError_GpuIsLost"]
    NVMLError_Unknown = _ERRORS["NVMLError_Unknown"]
    NVMLError_Uninitialized = _ERRORS["NVMLError_Uninitialized"]
    NVMLError_DriverNotLoaded = _ERRORS["NVMLError_DriverNotLoaded"]
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t
    NVML_GPU_INSTANCE_PROFILE_COUNT = 18
    nvmlEventTypeXidCriticalError = 8

    def __init__(
        self, calls: Mapping[str, Mapping[str, Any]], *, files: Mapping[str, str] | None = None
    ) -> None:
        self.recorded = dict(calls)
        #: Host files recorded with the answers, by absolute path.
        self.host_files = dict(files or {})
        #: Every key asked, in order (tests check what the driver touched).
        self.asked: list[str] = []
        self.initialised = False
        self.lost: set[int] = set()
        #: The calls that would have changed a GPU, in order.
        self.writes: list[str] = []
        self._events: list[SimpleNamespace] = []
        self._pending = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def from_files(cls, paths: Iterable[Path]) -> ReplayNvml:
        calls: dict[str, Mapping[str, Any]] = {}
        files: dict[str, str] = {}
        for path in paths:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, ValueError) as exc:
                raise AgentError(f"cannot read NVML recording {path}: {exc}") from exc
            calls.update(data.get("calls") or {})
            files.update(data.get("files") or {})
        if not calls:
            raise AgentError("the NVML recordings hold no calls")
        return cls(calls, files=files)

    # ---- replay machinery

    def _answer(self, key: str) -> Any:
        with self._lock:
            self.asked.append(key)
        entry = self.recorded.get(key)
        if entry is None:
            raise ReplayGapError(f"the NVML recording has no answer for {key!r}")
        if entry.get("ok"):
            return _attrs(entry.get("value"))
        text = str(entry.get("value") or "")
        error = _ERRORS.get(text.split(":", 1)[0].strip(), NVMLError)
        raise error(text)

    def _device(self, handle: Handle, call: str) -> Any:
        if handle.gpu in self.lost:
            raise self.NVMLError_GpuIsLost("GPU is lost")
        return self._answer(f"{handle.key} {call}")

    # ---- test hooks

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Queue a critical-XID event of GPU `gpu` for the next `nvmlEventSetWait_v2`."""
        with self._lock:
            self._events.append(
                SimpleNamespace(
                    eventType=self.nvmlEventTypeXidCriticalError,
                    eventData=xid,
                    device=Handle(f"[{gpu}]", gpu),
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
            )
            self._pending.set()

    def lose(self, gpu: int) -> None:
        """From now on GPU `gpu` answers `NVMLError_GpuIsLost`."""
        self.lost.add(gpu)

    # ---- system

    def nvmlInit(self) -> None:
        self._answer("nvmlInit")
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._answer("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> Any:
        return self._answer("nvmlSystemGetDriverVersion")

    def nvmlSystemGetCudaDriverVersion(self) -> Any:
        return self._answer("nvmlSystemGetCudaDriverVersion")

    def nvmlDeviceGetCount(self) -> Any:
        return self._answer("nvmlDeviceGetCount")

    # ---- GPUs

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._answer(f"[{index}] nvmlDeviceGetHandleByIndex")
        return Handle(f"[{index}]", index)

    def nvmlDeviceGetUUID(self, handle: Handle) -> Any:
        return self._answer(f"{handle.key} nvmlDeviceGetUUID")

    def nvmlDeviceGetName(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetName")

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetMemoryInfo")

    def nvmlDeviceGetCudaComputeCapability(self, handle: Handle) -> Any:
        return tuple(self._device(handle, "nvmlDeviceGetCudaComputeCapability"))

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetMinorNumber")

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetPciInfo")

    def nvmlDeviceGetArchitecture(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetArchitecture")

    def nvmlDeviceGetBrand(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetBrand")

    def nvmlDeviceGetMigMode(self, handle: Handle) -> Any:
        return list(self._device(handle, "nvmlDeviceGetMigMode"))

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Handle, profile: int) -> Any:
        return self._device(handle, f"nvmlDeviceGetGpuInstanceProfileInfo(profile={profile})")

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Handle, profile_id: int, placements: Any, count: Any
    ) -> int:
        """pynvml's C-shaped call: `placements` NULL asks for the count only."""
        answer = self._device(handle, f"nvmlDeviceGetGpuInstancePossiblePlacements(profileId={profile_id})")
        if placements is not None:
            for i, placement in enumerate(answer):
                placements[i].start = int(placement.start)
                placements[i].size = int(placement.size)
        count._obj.value = len(answer)
        return 0

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetMaxMigDeviceCount")

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        self._device(handle, f"nvmlDeviceGetMigDeviceHandleByIndex({index})")
        return Handle(f"[{handle.gpu}/{index}]", handle.gpu)

    def nvmlDeviceGetGpuInstanceId(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetGpuInstanceId")

    def nvmlDeviceGetComputeInstanceId(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetComputeInstanceId")

    def nvmlDeviceGetAttributes(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlDeviceGetAttributes")

    def nvmlDeviceGetGpuInstanceById(self, handle: Handle, gpu_instance: int) -> Handle:
        self._device(handle, f"nvmlDeviceGetGpuInstanceById({gpu_instance})")
        return Handle(f"[{handle.gpu} gi {gpu_instance}]", handle.gpu)

    def nvmlGpuInstanceGetInfo(self, handle: Handle) -> Any:
        return self._device(handle, "nvmlGpuInstanceGetInfo")

    # ---- settings

    def nvmlDeviceSetComputeMode(self, handle: Handle, mode: int) -> None:
        key = f"{handle.key} nvmlDeviceSetComputeMode({int(mode)})"
        with self._lock:
            self.writes.append(key)
        if key not in self.recorded:
            raise self.NVMLError_NotSupported(f"{key} is not in the recording: a replay changes no GPU")
        self._device(handle, f"nvmlDeviceSetComputeMode({int(mode)})")

    # ---- events

    def nvmlEventSetCreate(self) -> Any:
        self._answer("nvmlEventSetCreate")
        return SimpleNamespace(kind="event-set")

    def nvmlDeviceRegisterEvents(self, handle: Handle, types: int, events: Any) -> None:
        self._device(handle, "nvmlDeviceRegisterEvents(XidCriticalError)")

    def nvmlEventSetWait_v2(self, events: Any, timeout_ms: int) -> Any:
        self._pending.wait(timeout_ms / 1000)
        with self._lock:
            if self._events:
                event = self._events.pop(0)
                if not self._events:
                    self._pending.clear()
                return event
        key = next((k for k in self.recorded if k.startswith("nvmlEventSetWait_v2")), "nvmlEventSetWait_v2")
        return self._answer(key)

    def nvmlEventSetFree(self, events: Any) -> None:
        self._answer("nvmlEventSetFree")
