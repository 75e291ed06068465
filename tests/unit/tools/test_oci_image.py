"""hack/lib/oci_image.py: a folder's layer and an image of layers, as `ctr images import`
reads them (OCI layout; digests of the compressed blob and of the uncompressed tar)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def oci() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oci_image", ROOT / "hack" / "lib" / "oci_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_layer_holds_the_paths_asked_for_with_links_modes_and_the_right_digests(
    oci: ModuleType, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "opt/app/bin").mkdir(parents=True)
    (root / "opt/app/bin/tool").write_text("#!/bin/sh\n")
    (root / "opt/app/bin/tool").chmod(0o755)
    os.symlink("tool", root / "opt/app/bin/alias")
    os.link(root / "opt/app/bin/tool", root / "opt/app/hard")
    (root / "etc").mkdir()
    (root / "etc/skipped").write_text("not asked for")
    (root / "dev").mkdir()
    (root / "dev/null-ish").write_text("excluded content")
    out = tmp_path / "layer.tar.gz"

    meta = oci.dir_layer(root=root, out=out, paths=["opt/app", "dev"], exclude=["dev"])

    blob = out.read_bytes()
    raw = gzip.decompress(blob)
    assert meta == {"digest": sha(blob), "diff_id": sha(raw), "size": len(blob)}
    assert json.loads(Path(f"{out}.json").read_text()) == meta
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    # Parents before children; a folder's files before its subfolders.
    assert list(members) == ["opt", "opt/app", "opt/app/hard", "opt/app/bin", "opt/app/bin/alias",
                             "opt/app/bin/tool", "dev"]  # fmt: skip
    assert members["opt/app/hard"].isfile() and members["opt/app/hard"].mode & 0o777 == 0o755
    assert members["opt/app/bin/alias"].issym() and members["opt/app/bin/alias"].linkname == "tool"
    assert members["opt/app/bin/tool"].islnk() and members["opt/app/bin/tool"].linkname == "opt/app/hard"
    assert members["dev"].isdir()


def test_an_image_stacks_layers_under_its_config_and_carries_its_full_name(
    oci: ModuleType, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a/file").write_text("x")
    layers = []
    for name in ("one", "two"):
        path = tmp_path / f"{name}.tar.gz"
        oci.dir_layer(root=root, out=path, paths=["a"], exclude=[])
        layers.append(path)
    out = tmp_path / "image.tar"
    config = {"Entrypoint": ["draco"], "User": "65532:65532", "Env": ["PATH=/opt/draco/bin"]}

    oci.image(layers=layers, out=out, name="draco:0.1.0", config=config, history="test")

    with tarfile.open(out) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/draco:0.1.0"
    blobs = {
        f"sha256:{name.rsplit('/', 1)[1]}": data for name, data in files.items() if name.startswith("blobs/")
    }
    assert all(sha(data) == digest for digest, data in blobs.items())
    manifest = json.loads(blobs[entry["digest"]])
    image_config = json.loads(blobs[manifest["config"]["digest"]])
    assert image_config["config"] == config
    metas = [json.loads(Path(f"{p}.json").read_text()) for p in layers]
    assert image_config["rootfs"]["diff_ids"] == [m["diff_id"] for m in metas]
    assert [layer["digest"] for layer in manifest["layers"]] == [m["digest"] for m in metas]


@pytest.mark.parametrize(
    ("ref", "full"),
    [
        ("draco:1", "docker.io/library/draco:1"),
        ("team/draco:1", "docker.io/team/draco:1"),
        ("draco.invalid/draco:1", "draco.invalid/draco:1"),
        ("localhost:5000/draco:1", "localhost:5000/draco:1"),
        ("localhost/draco:1", "localhost/draco:1"),
    ],
)
def test_names_are_normalized_as_container_runtimes_do(oci: ModuleType, ref: str, full: str) -> None:
    assert oci.normalize(ref) == full


def test_the_test_nodes_busybox_and_pause_images_share_one_layer(oci: ModuleType, tmp_path: Path) -> None:
    busybox = tmp_path / "busybox"
    busybox.write_text("#!/bin/sh\necho 'sh\nsleep'\n")
    busybox.chmod(0o755)
    out = tmp_path / "images.tar"

    oci.build(busybox=busybox, out=out, name="draco.invalid/busybox:local", pause="draco.invalid/pause:local")

    with tarfile.open(out) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    manifests = json.loads(files["index.json"])["manifests"]
    names = [m["annotations"]["io.containerd.image.name"] for m in manifests]
    assert names == ["draco.invalid/busybox:local", "draco.invalid/pause:local"]
    blobs = {
        f"sha256:{name.rsplit('/', 1)[1]}": data for name, data in files.items() if name.startswith("blobs/")
    }
    layers = {json.loads(blobs[m["digest"]])["layers"][0]["digest"] for m in manifests}
    assert len(layers) == 1
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blobs[layers.pop()]))) as tar:
        assert {"bin/busybox", "bin/sh", "bin/sleep", "etc/passwd"} <= set(tar.getnames())
