"""Helpers for the tests on the real node: a driver of the test's own, the agent with NRI,
the operator, pods running the local busybox image, and what their containers saw."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from draco.agent.metadata import first_known
from draco.api.constants import CLAIMS_ANNOTATION, SCHEDULING_GATE
from draco.tools.dev.controlplane import ControlPlane
from draco.tools.dev.node import IMAGE, Node
from tests.e2e.agent_support import CLAIMS, pool_complete, slices_of, unique
from tests.e2e.support import DracoProcess, json_list, start_operator, wait_for

METADATA_ROOT = "/var/run/kubernetes.io/dra-device-attributes"
#: NRI's default validator refuses a container when a plugin named here is not connected.
REQUIRED_PLUGINS = "required-plugins.noderesource.dev"
#: What every test container prints, then it sleeps until the pod is deleted.
SHOW = (
    'echo "---- env"; env | sort; '
    f'echo "---- files"; for f in $(find {METADATA_ROOT} -type f 2>/dev/null); do echo "FILE $f"; '
    'tr -d "\\n" < "$f"; echo; done; '
    'echo "---- devices"; for d in /dev/fake-*; do [ -c "$d" ] && echo "DEVICE $d $(head -c 4 "$d" | od -An -tx1 | tr -d " ")"; done; '
    'echo "---- end"'
)


def devices_yaml(driver: str, *, count: int = 2) -> str:
    return f"""
name: {driver}
cdiClass: gpu
bindingConditions: true
devices:
- name: gpu-{{index}}
  count: {count}
  attributes: {{model: A100, index: {{int: "{{index}}"}}}}
  env: {{GPU_DEVICE: "gpu-{{index}}", GPU_MODE: fast}}
  deviceNodes:
  - {{path: "/dev/fake-gpu{{index}}", hostPath: /dev/zero}}
"""


@dataclass
class Seen:
    """What one container printed."""

    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    complete: bool = False


def parse_output(text: str) -> Seen:
    seen, section = Seen(), ""
    for line in text.splitlines():
        if line.startswith("---- "):
            section = line[5:]
            seen.complete = seen.complete or section == "end"
        elif section == "env" and "=" in line:
            key, _, value = line.partition("=")
            seen.env[key] = value
        elif section == "files" and line.startswith("FILE "):
            seen.files[line[5:]] = None
            current = line[5:]
        elif section == "files" and line.strip():
            # A metadata file is a stream (one object per version; the newlines are gone
            # here): what a consumer reads is its first object.
            seen.files[current] = first_known(line)
        elif section == "devices" and line.startswith("DEVICE "):
            _, path, data = line.split(" ", 2)
            seen.devices[path] = data
    return seen


@dataclass
class NodeTest:
    """One test's world on the shared node: its driver, class, agent and operator."""

    kube: ControlPlane
    node: Node
    namespace: str
    draco_process: Callable[..., DracoProcess]
    tmp_path: Path
    driver: str = field(default_factory=lambda: f"{unique('gpu')}.draco.dev")
    agent: DracoProcess | None = None
    operator: DracoProcess | None = None

    @property
    def device_class(self) -> str:
        return f"gpu-{self.namespace}"

    @property
    def cdi_dir(self) -> Path:
        return self.tmp_path / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.tmp_path / "state"

    def start_agent(self, *, name: str = "agent") -> DracoProcess:
        config = self.tmp_path / "devices.yaml"
        if not config.exists():
            config.write_text(devices_yaml(self.driver))
        self.agent = self.draco_process(
            "agent", "--node-name", self.node.name, "--driver", "fake", "--config", str(config),
            "--cdi-dir", str(self.cdi_dir), "--state-dir", str(self.state_dir), "--poll-interval", "0.2",
            "--nri-socket", str(self.node.nri_socket),
            name=name,
        )  # fmt: skip
        agent = self.agent
        wait_for(
            lambda: "NRI plugin registered" in agent.logs(), timeout=60, what="the agent to register with NRI"
        )
        return agent

    def start_operator(self) -> DracoProcess:
        self.operator = start_operator(self.draco_process, self.namespace)
        return self.operator

    def start(self, *, class_config: list[dict[str, Any]] | None = None) -> NodeTest:
        self.start_agent()
        wait_for(
            lambda: pool_complete(
                [s for s in slices_of(self.kube, self.node.name) if s["spec"]["driver"] == self.driver]
            ),
            timeout=60,
            what="the agent's slices",
        )
        device_class: dict[str, Any] = {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "DeviceClass",
            "metadata": {"name": self.device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]},
        }
        if class_config:
            device_class["spec"]["config"] = class_config
        template = {
            "apiVersion": "resource.draco.dev/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": self.namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": self.device_class}}]
                    }
                }
            },
        }
        self.kube.kubectl("apply", "-f", "-", input=json_list((device_class, template)))
        self.start_operator()
        return self

    def fake_config(self, **env: str) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "parameters": {"apiVersion": "fake.draco.dev/v1alpha1", "kind": "FakeDeviceConfig", "env": env},
        }

    # ---- pods

    def create_pod(
        self,
        name: str,
        *,
        claims: list[dict[str, Any]],
        containers: list[str] = ("main",),  # type: ignore[assignment]
        init: dict[str, Any] | None = None,
        volumes: list[dict[str, Any]] | None = None,
    ) -> None:
        spec: dict[str, Any] = {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": c,
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", f"{SHOW}; exec sleep 3600"],
                }
                for c in containers
            ],
        }
        if init:
            spec["initContainers"] = [init]
        if volumes:
            spec["volumes"] = volumes
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": {CLAIMS_ANNOTATION: json.dumps(claims)},
            },
            "spec": spec,
        }
        self.kube.kubectl("create", "-f", "-", input=json.dumps(pod))

    def pod(self, name: str) -> dict[str, Any]:
        out = self.kube.kubectl("get", "pod", "-n", self.namespace, name, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def alive(self) -> None:
        """Fail at once, with its log, when the agent or the operator has exited."""
        for process in (self.agent, self.operator):
            if process is not None and process.popen.poll() is not None:
                pytest.fail(f"{process.log_path.name} exited:\n{process.logs()[-3000:]}")

    def running(self, name: str) -> bool:
        self.alive()
        pod = self.pod(name)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)

    def wait_running(self, name: str, *, timeout: float = 120) -> dict[str, Any]:
        # The pod's state when the wait gives up, not when it began (a pod the kubelet
        # rejected at admission is Pending first and Failed after).
        wait_for(
            lambda: self.running(name),
            timeout=timeout,
            what=f"pod {name} to run",
            explain=lambda: self.describe(name),
        )
        return self.pod(name)

    def seen(self, pod: str, container: str = "main") -> Seen:
        def complete() -> Seen | None:
            out = self.kube.kubectl("logs", "-n", self.namespace, pod, "-c", container, check=False)
            seen = parse_output(out.stdout) if out.returncode == 0 else None
            return seen if seen and seen.complete else None

        result = wait_for(complete, timeout=60, what=f"the output of {pod}/{container}")
        assert isinstance(result, Seen)
        return result

    def describe(self, name: str) -> str:
        """The pod's phase, conditions and the namespace's recent events (failure messages)."""
        pod = self.pod(name)
        status = pod.get("status") or {}
        out = self.kube.kubectl("get", "events", "-n", self.namespace, "-o", "json", check=False)
        events = json.loads(out.stdout).get("items", []) if out.returncode == 0 else []
        lines = [f"{e.get('reason')}: {e.get('message')}" for e in events[-8:]]
        return (
            f"phase={status.get('phase')} reason={status.get('reason')} message={status.get('message')} "
            f"statuses={status.get('containerStatuses')} events={lines}"
        )

    def delete_pod(self, name: str) -> None:
        self.kube.kubectl("delete", "pod", "-n", self.namespace, name, "--wait=false")

    def claims(self) -> list[dict[str, Any]]:
        out = self.kube.kubectl("get", CLAIMS, "-n", self.namespace, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        return items

    def cdi_specs(self) -> list[Path]:
        return sorted(self.cdi_dir.glob("*.json"))

    def metadata_files(self) -> list[Path]:
        return sorted((self.state_dir / "dra-device-metadata").rglob("*.json"))

    def scheduled_by(self, name: str) -> str | None:
        out = self.kube.kubectl(
            "get", "events", "-n", self.namespace, "--field-selector", f"involvedObject.name={name},reason=Scheduled",
            "-o", "json",
        )  # fmt: skip
        items = json.loads(out.stdout)["items"]
        if not items:
            return None
        event = items[0]
        return str(event.get("reportingComponent") or (event.get("source") or {}).get("component") or "")


def metadata_path(
    *, template_claim: str | None = None, claim: str | None = None, request: str, driver: str
) -> str:
    base = f"resourceclaimtemplates/{template_claim}" if template_claim else f"resourceclaims/{claim}"
    return f"{METADATA_ROOT}/{base}/{request}/{driver}-metadata.json"


def zero_bytes(data: str) -> bool:
    """`od` of 4 bytes read from /dev/zero, the fake devices' host node."""
    return re.fullmatch(r"0{8}", data) is not None
