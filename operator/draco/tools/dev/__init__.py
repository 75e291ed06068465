"""Development tooling: a real, local Kubernetes control plane for tests and demos."""

from draco.tools.dev.controlplane import ControlPlane, find_binaries

__all__ = ["ControlPlane", "find_binaries"]
