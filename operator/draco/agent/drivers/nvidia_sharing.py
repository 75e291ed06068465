"""What a `GpuConfig`'s sharing does to the GPU: time-slice intervals and MPS daemons.

NVML has no call for the time-slice of a GPU's compute policy; `nvidia-smi compute-policy
-i <uuid> --set-timeslice <n>` (from the NVIDIA driver, as NVIDIA's DRA driver runs it) is
the way, so an interval other than `Default` is applied by running it and refused, with
the reason, where it is not on the agent's PATH or fails (a MIG device, a GPU or driver
without compute policies, no permission). The interval stays set after the claim goes
(as with NVIDIA's driver): it is the GPU's setting, the next claim that asks sets its own.

MPS: one control daemon per claim (`nvidia-cuda-mps-control -d`, from the NVIDIA driver),
for the claim's MPS devices (`CUDA_VISIBLE_DEVICES` their UUIDs), with its pipe and log
folders under `<mps dir>/<claim uid>/`, `mpsConfig`'s active-thread percentage and
pinned-memory limits sent to it, and each whole GPU's compute mode set to
`EXCLUSIVE_PROCESS` through NVML (so every CUDA process on it goes through the daemon).
The containers get `CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps` with the pipe folder there,
and `/dev/shm` from the host folder that is the agent's own `/dev/shm`
(`--nvidia-mps-shm-dir`): server and clients must share it. Unprepare stops the daemon
(`quit`), puts the compute mode back to `DEFAULT` and removes the folders; what a daemon
was started for is written beside it, so an agent restarted meanwhile still knows.
Refused, with the reason: no `nvidia-cuda-mps-control` on the PATH, no shared `/dev/shm`,
a GPU shared by several claims (`--nvidia-shares`: `EXCLUSIVE_PROCESS` would lock the
other shares out; NVIDIA's driver refuses it too), NVML refusing the compute mode.

The daemon is a child of the agent: restarting the agent's container stops the daemons
it started (their clients lose their server) until the claims are prepared again.

Everything that runs a program goes through `Tools`, which tests replace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from draco.agent.drivers.base import ContainerEdits, Mount
from draco.agent.drivers.nvidia_config import INTERVALS, MpsSettings
from draco.errors import AgentError, DeviceConfigError
from draco.logs import get_logger

__all__ = ["MPS_PIPE_IN_CONTAINER", "MpsDaemons", "MpsGpu", "Tools", "set_time_slice"]

log = get_logger(__name__)

NVIDIA_SMI: Final = "nvidia-smi"
MPS_CONTROL: Final = "nvidia-cuda-mps-control"
MPS_PIPE_IN_CONTAINER: Final = "/tmp/nvidia-mps"
_COMPUTEMODE_DEFAULT: Final = 0
_COMPUTEMODE_EXCLUSIVE_PROCESS: Final = 3
_RECORD: Final = "daemon.json"
_MIB: Final = 1024 * 1024


class Tools:
    """The host programs the driver runs: found on the PATH, run with a timeout."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: str | None = None
    ) -> str:
        """Run `argv`; its output, or `AgentError` with what it printed."""
        try:
            done = subprocess.run(
                list(argv),
                env={**os.environ, **(env or {})},
                input=stdin,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AgentError(f"{argv[0]}: {exc}") from exc
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise AgentError(
                f"{' '.join(argv)} exited {done.returncode}: {said[-1] if said else 'no output'}"
            )
        return done.stdout


def set_time_slice(tools: Tools, *, uuid: str, interval: str, where: str) -> None:
    """Set the time-slice interval of the GPU with `uuid` (see the module docstring)."""
    program = tools.which(NVIDIA_SMI)
    if program is None:
        raise DeviceConfigError(
            f"{where}: time-slice interval {interval} cannot be applied here: NVML has no call for it and "
            f"{NVIDIA_SMI} (its compute-policy command) is not on the agent's PATH; use interval Default"
        )
    try:
        tools.run([program, "compute-policy", "-i", uuid, "--set-timeslice", str(INTERVALS[interval])])
    except AgentError as exc:
        raise DeviceConfigError(
            f"{where}: time-slice interval {interval} was refused by the GPU: {exc}"
        ) from exc
    log.info("Set the GPU's time-slice interval", uuid=uuid, interval=interval)


@dataclass(frozen=True)
class MpsGpu:
    """One device an MPS daemon serves."""

    uuid: str
    #: The NVML handle of the whole GPU whose compute mode is set; None for a MIG device.
    handle: Any = None
    #: The GPU's index (for the record), None for a MIG device.
    index: int | None = None


class MpsDaemons:
    """The MPS control daemons of the claims prepared on this node."""

    def __init__(self, *, nvml: Any, tools: Tools, root: Path | None, shm_dir: Path | None) -> None:
        self.nvml = nvml
        self.tools = tools
        self.root = root
        self.shm_dir = shm_dir

    def _folder(self, claim_uid: str) -> Path:
        assert self.root is not None
        if not claim_uid or "/" in claim_uid or claim_uid.startswith("."):
            raise AgentError(f"claim uid {claim_uid!r} cannot name an MPS folder")
        return self.root / claim_uid

    def _compute_mode(self, gpu: MpsGpu, mode: int) -> None:
        self.nvml.nvmlDeviceSetComputeMode(gpu.handle, mode)

    def start(
        self, claim_uid: str, gpus: Sequence[MpsGpu], settings: MpsSettings, *, where: str
    ) -> ContainerEdits:
        """The daemon of claim `claim_uid` for `gpus` (started unless it runs), and what its
        clients need."""
        program = self.tools.which(MPS_CONTROL)
        if program is None:
            raise DeviceConfigError(
                f"{where}: sharing strategy MPS cannot be applied here: {MPS_CONTROL} (the NVIDIA driver's MPS "
                "control daemon) is not on the agent's PATH"
            )
        if self.root is None or self.shm_dir is None:
            raise DeviceConfigError(
                f"{where}: sharing strategy MPS cannot be applied here: the agent's /dev/shm is not shared with "
                "the host for the MPS clients (start it with --nvidia-mps-shm-dir; chart value agent.nvidiaMps)"
            )
        folder = self._folder(claim_uid)
        pipe, logs = folder / "pipe", folder / "log"
        env = {
            "CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus),
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(logs),
        }
        if not (folder / _RECORD).exists():
            commands = _commands(settings, gpus, where=where)
            pipe.mkdir(parents=True, exist_ok=True)
            logs.mkdir(parents=True, exist_ok=True)
            record = {"uuids": [g.uuid for g in gpus], "gpus": [g.index for g in gpus if g.index is not None]}
            (folder / _RECORD).write_text(json.dumps(record))
            try:
                for gpu in gpus:
                    if gpu.handle is not None:
                        self._compute_mode(gpu, _COMPUTEMODE_EXCLUSIVE_PROCESS)
                self.tools.run([program, "-d"], env=env)
                for command in commands:
                    self.tools.run([program], env=env, stdin=command + "\n")
            except (AgentError, self.nvml.NVMLError) as exc:
                self.stop(claim_uid)
                raise DeviceConfigError(
                    f"{where}: the MPS control daemon could not be started: {exc}"
                ) from exc
            log.info("Started an MPS control daemon", claim_uid=claim_uid, gpus=env["CUDA_VISIBLE_DEVICES"])
        return ContainerEdits(
            env=(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_IN_CONTAINER}",),
            mounts=(
                Mount(
                    host_path=str(pipe),
                    container_path=MPS_PIPE_IN_CONTAINER,
                    options=("rw", "nosuid", "nodev", "bind"),
                ),
                Mount(
                    host_path=str(self.shm_dir),
                    container_path="/dev/shm",
                    options=("rw", "nosuid", "nodev", "bind"),
                ),
            ),
        )

    def stop(self, claim_uid: str) -> None:
        """Stop claim `claim_uid`'s daemon, if it has one; best effort, logged."""
        if self.root is None:
            return
        folder = self._folder(claim_uid)
        try:
            record = json.loads((folder / _RECORD).read_text())
        except (OSError, ValueError):
            shutil.rmtree(folder, ignore_errors=True)
            return
        program = self.tools.which(MPS_CONTROL)
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
        if program is not None:
            try:
                self.tools.run([program], env=env, stdin="quit\n")
            except AgentError as exc:
                log.warning("Stopping an MPS control daemon failed", claim_uid=claim_uid, error=str(exc))
        for index in record.get("gpus") or []:
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(int(index))
                self.nvml.nvmlDeviceSetComputeMode(handle, _COMPUTEMODE_DEFAULT)
            except self.nvml.NVMLError as exc:
                log.warning("Could not put the GPU's compute mode back", gpu=index, error=str(exc))
        shutil.rmtree(folder, ignore_errors=True)
        log.info("Stopped an MPS control daemon", claim_uid=claim_uid)


def _commands(settings: MpsSettings, gpus: Sequence[MpsGpu], *, where: str) -> list[str]:
    """What the daemon is told: `mpsConfig`'s defaults, per-device limits by UUID or index."""
    out: list[str] = []
    if settings.active_thread_percentage is not None:
        out.append(f"set_default_active_thread_percentage {settings.active_thread_percentage}")
    limits: dict[str, int] = {}
    if settings.pinned_memory_limit is not None:
        limits = {g.uuid: settings.pinned_memory_limit for g in gpus}
    uuids = [g.uuid for g in gpus]
    for key, amount in settings.per_device_pinned_memory_limit.items():
        if key in uuids:
            limits[key] = amount
        elif key.isdigit() and int(key) < len(uuids):
            limits[uuids[int(key)]] = amount
        else:
            raise DeviceConfigError(
                f"{where}: defaultPerDevicePinnedMemoryLimit names {key!r}, which is neither the UUID nor the index of a "
                f"device of the claim ({', '.join(uuids)})"
            )
    for uuid, amount in limits.items():
        out.append(f"set_default_device_pinned_mem_limit {uuid} {amount // _MIB}M")
    return out
