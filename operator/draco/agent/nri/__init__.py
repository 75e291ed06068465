"""NRI (Node Resource Interface) in Python: how the agent puts devices into containers.

Containerd 2.x and CRI-O ask the NRI plugins connected to them, for each container being
created, what to add to it. The agent is such a plugin: it answers with the environment,
device nodes, mounts and hooks of the CDI specs it wrote for the pod's claims. This
package is the only place that speaks the protocol (ttrpc over a multiplexed unix socket,
protobuf messages): `wire` frames bytes, `messages` declares the protobuf messages and
converts them to plain dataclasses, `plugin` runs the connection. The rest of the agent
sees `NriPlugin`, `NriHandler` and the dataclasses.
"""

from draco.agent.nri.messages import Adjustment, Container, DeviceNode, Hook, Mount, PodSandbox
from draco.agent.nri.plugin import NriHandler, NriPlugin, NriSession

__all__ = [
    "Adjustment",
    "Container",
    "DeviceNode",
    "Hook",
    "Mount",
    "NriHandler",
    "NriPlugin",
    "NriSession",
    "PodSandbox",
]
