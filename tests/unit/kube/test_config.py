"""The one credential order (`draco.kube.config`): $KUBECONFIG, in-cluster, ~/.kube/config."""

from __future__ import annotations

from pathlib import Path

import pytest

from draco.errors import CredentialsError
from draco.kube.config import load_configuration, new_api_client

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: "{token}"}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""


def write_kubeconfig(path: Path, *, server: str, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KUBECONFIG.format(server=server, token=token))
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


async def test_kubeconfig_wins_over_the_default_file(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kubeconfig(home / ".kube" / "config", server="https://default.example:6443", token="d")
    explicit = write_kubeconfig(tmp_path / "explicit", server="https://explicit.example:6443", token="e")
    monkeypatch.setenv("KUBECONFIG", str(explicit))
    # Also in a pod: a KUBECONFIG set on purpose beats the service account.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    configuration = await load_configuration()
    assert configuration.host == "https://explicit.example:6443"
    assert configuration.api_key["BearerToken"] == "Bearer e"


async def test_the_default_file_when_not_in_a_pod(home: Path) -> None:
    write_kubeconfig(home / ".kube" / "config", server="https://default.example:6443", token="d")
    configuration = await load_configuration()
    assert configuration.host == "https://default.example:6443"


@pytest.mark.skipif(
    Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists(),
    reason="runs inside a pod with a service account",
)
async def test_a_pod_without_a_token_falls_back_to_the_default_file(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    write_kubeconfig(home / ".kube" / "config", server="https://default.example:6443", token="d")
    configuration = await load_configuration()
    assert configuration.host == "https://default.example:6443"


async def test_a_kubeconfig_and_a_context_named_as_kubectl_flags_name_them(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "KUBECONFIG", str(write_kubeconfig(tmp_path / "env", server="https://env.example", token="v"))
    )
    named = write_kubeconfig(tmp_path / "named", server="https://named.example:6443", token="n")
    configuration = await load_configuration(kubeconfig=str(named))
    assert configuration.host == "https://named.example:6443"
    # A second cluster and context beside the current one: --context picks it.
    text = named.read_text().replace(
        "users:", '- name: c2\n  cluster: {server: "https://second.example:6443"}\nusers:'
    )
    named.write_text(
        text.replace("current-context: x", "- name: y\n  context: {cluster: c2, user: u}\ncurrent-context: x")
    )
    configuration = await load_configuration(kubeconfig=str(named), context="y")
    assert configuration.host == "https://second.example:6443"
    with pytest.raises(CredentialsError, match=r"kubeconfig .*named.*nope"):
        await load_configuration(kubeconfig=str(named), context="nope")
    with pytest.raises(CredentialsError, match=r"kubeconfig .*missing"):
        await load_configuration(kubeconfig=str(tmp_path / "missing"))


async def test_no_credentials_at_all_is_a_clear_error(home: Path) -> None:
    with pytest.raises(CredentialsError, match="KUBECONFIG"):
        await load_configuration()


async def test_the_session_reads_no_environment_per_request(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit = write_kubeconfig(tmp_path / "explicit", server="https://api.example:6443", token="e")
    monkeypatch.setenv("KUBECONFIG", str(explicit))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    api = await new_api_client()
    try:
        assert api.rest_client.pool_manager.trust_env is False
        # ... but the proxy the environment names is still used, resolved once.
        assert api.configuration.proxy == "http://proxy.example:3128"
    finally:
        await api.close()
    monkeypatch.setenv("NO_PROXY", "api.example")
    api = await new_api_client()
    try:
        assert not api.configuration.proxy
    finally:
        await api.close()
