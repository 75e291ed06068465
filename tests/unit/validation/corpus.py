"""The validation corpus: manifests of all five kinds whose verdict a real kube-apiserver
gave, read by the unit tests (draco alone) and by the agreement e2e test (draco and
kube-apiserver side by side).

Each file in `tests/e2e/corpus/` holds one `resource.k8s.io/v1` manifest. Its name says
the verdict of kube-apiserver 1.37, the test control plane (`<kind>-valid-…` or
`<kind>-invalid-…`); a first line `# namespace=admin` means it is judged in a namespace
labelled for admin access. A leading comment line `# 1.38: refused (<upstream change>)`
marks a manifest 1.37 accepts and Kubernetes 1.38 refuses: draco follows 1.38 there (a
known, documented difference from the 1.37 server, docs/fidelity.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from draco.validation.admin import NATIVE_ADMIN_ACCESS_LABEL

__all__ = ["ADMIN_LABELS", "CORPUS", "REFUSED_FROM_138", "Manifest", "corpus", "example_manifests"]

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "e2e" / "corpus"
EXAMPLES = ROOT / "examples"
ADMIN_LABELS: Mapping[str, str] = {
    NATIVE_ADMIN_ACCESS_LABEL: "true",
    "resource.draco.dev/admin-access": "true",
}
#: The comment that marks a manifest refused from Kubernetes 1.38 on.
REFUSED_FROM_138 = "# 1.38: refused"
FIVE_KINDS = {"DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice", "DeviceTaintRule"}


@dataclass(frozen=True)
class Manifest:
    name: str
    obj: dict[str, Any]
    #: True/False when the file name states the verdict; None for examples (no claim made).
    expect_valid: bool | None
    admin_namespace: bool
    #: The upstream change by which Kubernetes 1.38 refuses what 1.37 accepts (draco refuses
    #: it too); None when 1.37 and 1.38 agree.
    refused_from_138: str | None = None

    @property
    def draco_accepts(self) -> bool | None:
        """draco's verdict: 1.37's, except where 1.38 refuses."""
        return False if self.refused_from_138 else self.expect_valid

    @property
    def namespaced(self) -> bool:
        return self.obj.get("kind") in ("ResourceClaim", "ResourceClaimTemplate")


def corpus() -> list[Manifest]:
    out = []
    for path in sorted(CORPUS.glob("*.yaml")):
        text = path.read_text()
        first = text.splitlines()[0] if text else ""
        verdict = path.stem.split("-")[1]
        if verdict not in ("valid", "invalid"):
            raise ValueError(f"{path.name}: name it <kind>-valid-<what> or <kind>-invalid-<what>")
        comments = list(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines()))
        refused = [c.split(REFUSED_FROM_138, 1)[1].strip() for c in comments if REFUSED_FROM_138 in c]
        if refused and verdict != "valid":
            raise ValueError(f"{path.name}: only a manifest 1.37 accepts can be refused from 1.38")
        out.append(
            Manifest(
                name=path.stem,
                obj=yaml.safe_load(text),
                expect_valid=verdict == "valid",
                admin_namespace="namespace=admin" in first,
                refused_from_138=refused[0] if refused else None,
            )
        )
    return out


def _as_native(doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(doc)
    doc["apiVersion"] = "resource.k8s.io/v1"
    meta = dict(doc.get("metadata") or {})
    meta.pop("namespace", None)
    doc["metadata"] = meta
    return doc


def example_manifests() -> Iterator[Manifest]:
    """Every DRA object in `examples/` (any depth, multi-document YAML), as resource.k8s.io/v1."""
    for path in sorted(EXAMPLES.rglob("*.y*ml")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for i, doc in enumerate(docs):
            if not isinstance(doc, dict) or doc.get("kind") not in FIVE_KINDS:
                continue
            if not str(doc.get("apiVersion", "")).startswith(("resource.draco.dev/", "resource.k8s.io/")):
                continue
            name = f"example:{path.relative_to(ROOT)}#{i}"
            yield Manifest(name=name, obj=_as_native(doc), expect_valid=None, admin_namespace=False)
