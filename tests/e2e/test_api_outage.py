"""draco's processes started while kube-apiserver does not answer wait for it, then work.

In a cluster, a process that exits at start because kube-apiserver is restarting comes
back under its pod's CrashLoopBackOff, which grows to five minutes: a leader that lost
its Lease in an outage of seconds would be gone for minutes. The operator and the agent
here talk to the API server through a TCP proxy that refuses every connection when they
start. They must stay up, say in their logs that they are waiting for the API server,
and once the proxy lets connections through, start and serve a pod without a restart.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest

from draco.tools.dev.controlplane import ControlPlane
from tests.e2e import schedkit as k
from tests.e2e.agent_support import slices_of, unique
from tests.e2e.support import DracoProcess, start_operator, wait_for
from tests.e2e.tcpproxy import TcpProxy, proxied_kubeconfig
from tests.e2e.test_agent_flow import DEVICES, create_pod, setup

pytestmark = pytest.mark.e2e

WAITING = "API server not answering; trying again"


def logged(process: DracoProcess, event: str) -> bool:
    for line in process.logs().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == event:
            return True
    return False


def test_the_operator_and_the_agent_wait_for_an_api_server_that_does_not_answer_at_start(
    kube: ControlPlane, namespace: str, draco_process: Callable[..., DracoProcess], tmp_path: Path
) -> None:
    setup(kube, namespace)
    node = unique("outage")
    server = urllib.parse.urlsplit(kube.server)
    assert server.hostname is not None and server.port is not None
    with TcpProxy(server.hostname, server.port) as proxy:
        proxy.cut()
        env = {"KUBECONFIG": str(proxied_kubeconfig(kube.kubeconfig, proxy, tmp_path / "proxied"))}
        # With leader election (the chart's default): the version check, the election
        # and the start after it all meet the outage.
        operator = start_operator(draco_process, namespace, env=env)
        config = tmp_path / "devices.yaml"
        config.write_text(DEVICES)
        agent = draco_process(
            "agent", "--node-name", node, "--driver", "fake", "--config", str(config),
            "--cdi-dir", str(tmp_path / "cdi"), "--state-dir", str(tmp_path / "state"),
            "--poll-interval", "0.2", "--create-nodes",
            env=env, name="agent",
        )  # fmt: skip
        for process, name in ((operator, "operator"), (agent, "agent")):
            wait_for(lambda p=process: logged(p, WAITING), timeout=60, what=f"the {name} to say it waits")
        assert operator.popen.poll() is None, f"the operator exited:\n{operator.logs()[-3000:]}"
        assert agent.popen.poll() is None, f"the agent exited:\n{agent.logs()[-3000:]}"

        proxy.restore()
        wait_for(lambda: logged(operator, "Operator ready"), timeout=120, what="the operator ready")
        wait_for(lambda: slices_of(kube, node), timeout=120, what=f"{node}'s slices published")
        create_pod(kube, namespace, "p", node)

        def served() -> bool:
            pod = k.get(kube, "pod", "p", namespace=namespace)
            return pod is not None and not k.is_gated(pod)

        wait_for(served, timeout=120, what="the pod allocated and un-gated")
        assert operator.popen.poll() is None and agent.popen.poll() is None
        assert logged(operator, "API server answered") and logged(agent, "API server answered")
