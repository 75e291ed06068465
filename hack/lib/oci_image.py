"""Write OCI image layout tarballs: the test node's busybox images, and any image from layers.

No registry is reachable from our machines, so images are made here.

**The test node's images** (`hack/node.sh`), from Debian's statically linked busybox: one
layer (busybox plus a symlink per applet, a passwd and a group file) shared by two images,

- `<name>`: the workload image, `sh` by default;
- `<pause>`: the pod sandbox image, `sleep` forever (the runtime stops sandboxes with
  SIGKILL, so a pause process that handles signals is not needed).

    python3 hack/lib/oci_image.py --busybox /bin/busybox --out images.tar \\
        --name draco.invalid/busybox:local --pause draco.invalid/pause:local

**Any image from folders** (`hack/image.sh`, draco's own image): `layer` writes a gzipped
layer tar of a folder (or of some paths under it) beside a small JSON file with its
digests, so a layer that does not change (a base root filesystem) is written once;
`image` stacks such layers under a config (entrypoint, user, environment, labels):

    python3 hack/lib/oci_image.py layer --root rootfs --out base.tar.gz
    python3 hack/lib/oci_image.py layer --root stage --path opt/draco --out app.tar.gz
    python3 hack/lib/oci_image.py image --layer base.tar.gz --layer app.tar.gz \\
        --name draco.invalid/draco:0.1.0 --entrypoint draco --user 65532:65532 --out draco.tar

Tarballs are what `ctr images import` (and `docker load`, `podman load`, `skopeo copy
oci-archive:...`) read; each manifest carries the image name as the
`io.containerd.image.name` annotation, so no `--base-name` is needed. The busybox tarball
is deterministic (fixed timestamps and owners); a layer of a folder keeps its files'
owners, modes and times (Python's bytecode caches check the times of their sources).

Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


def _info(name: str, *, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer(busybox: Path) -> bytes:
    """The uncompressed layer tar: busybox, its applets, /etc/passwd, /etc/group, /tmp."""
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    names = sorted({a.strip() for a in applets.stdout.split() if a.strip() and a.strip() != "busybox"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("bin", "etc", "tmp", "proc", "sys", "dev", "root"):
            tar.addfile(_info(folder, kind=tarfile.DIRTYPE, mode=0o1777 if folder == "tmp" else 0o755))
        data = busybox.read_bytes()
        tar.addfile(_info("bin/busybox", mode=0o755, size=len(data)), io.BytesIO(data))
        for name in names:
            link = _info(f"bin/{name}", kind=tarfile.SYMTYPE, mode=0o777)
            link.linkname = "busybox"
            tar.addfile(link)
        for path, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            raw = text.encode()
            tar.addfile(_info(path, size=len(raw)), io.BytesIO(raw))
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def normalize(ref: str) -> str:
    """The full name a container runtime gives `ref` (`draco:1` is docker.io/library/draco:1),
    so the CRI finds an imported image under the name a pod spec uses."""
    first, _, rest = ref.partition("/")
    if not rest:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def _image_blobs(
    ref: str, config: dict[str, Any], layers: list[tuple[str, str, int]], history: str
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The config and manifest blobs of one image over `layers` ((digest, diff_id, size)
    each, bottom first), and its entry in the index."""
    blobs: dict[str, bytes] = {}
    config_blob = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id for _, diff_id, _ in layers]},
            "history": [{"created_by": history}],
        },
        sort_keys=True,
    ).encode()
    blobs[_digest(config_blob)] = config_blob
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": _digest(config_blob), "size": len(config_blob)},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": d, "size": size} for d, _, size in layers],
        },
        sort_keys=True,
    ).encode()
    blobs[_digest(manifest)] = manifest
    entry = {
        "mediaType": MEDIA_MANIFEST,
        "digest": _digest(manifest),
        "size": len(manifest),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {
            "io.containerd.image.name": ref,
            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
        },
    }
    return blobs, entry


def _write_layout(out: Path, manifests: list[dict[str, Any]], blobs: dict[str, bytes | Path]) -> None:
    """The OCI layout tarball: oci-layout, index.json and blobs (bytes, or files copied in)."""
    index = json.dumps({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests}).encode()
    layout = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info("oci-layout", size=len(layout)), io.BytesIO(layout))
        tar.addfile(_info("index.json", size=len(index)), io.BytesIO(index))
        for folder in ("blobs", "blobs/sha256"):
            tar.addfile(_info(folder, kind=tarfile.DIRTYPE, mode=0o755))
        for digest, data in sorted(blobs.items()):
            name = f"blobs/sha256/{digest.split(':', 1)[1]}"
            if isinstance(data, Path):
                with data.open("rb") as f:
                    tar.addfile(_info(name, size=data.stat().st_size), f)
            else:
                tar.addfile(_info(name, size=len(data)), io.BytesIO(data))
    tmp.rename(out)


def build(*, busybox: Path, out: Path, name: str, pause: str) -> None:
    raw = layer(busybox)
    compressed = gzip.compress(raw, compresslevel=9, mtime=0)
    blobs: dict[str, bytes | Path] = {_digest(compressed): compressed}
    layers = [(_digest(compressed), _digest(raw), len(compressed))]
    manifests = []
    for ref, config in (
        (name, {"Cmd": ["sh"], "Env": ["PATH=/bin"], "WorkingDir": "/"}),
        (pause, {"Entrypoint": ["/bin/sleep", "2147483647"], "Env": ["PATH=/bin"], "WorkingDir": "/"}),
    ):
        image_blobs, entry = _image_blobs(ref, config, layers, f"hack/lib/oci_image.py from {busybox}")
        blobs.update(image_blobs)
        manifests.append(entry)
    _write_layout(out, manifests, blobs)


# ---- layers of folders, images of layers


class _Hashing:
    """A write-only file that hashes what goes through it (and counts it)."""

    def __init__(self, target: Any = None) -> None:
        self.target = target
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        if self.target is not None:
            self.target.write(data)
        return len(data)

    def flush(self) -> None:
        if self.target is not None:
            self.target.flush()


def _walk(root: Path, paths: list[str], excluded: set[str]) -> Iterator[str]:
    """Relative paths under `root` (each of `paths`, else everything), parents first, sorted;
    the contents of `excluded` folders are left out (the folders themselves are kept)."""
    for top in paths or ["."]:
        top = os.path.normpath(top)
        parts = Path(top).parts if top != "." else ()
        for i in range(1, len(parts)):
            yield os.path.join(*parts[:i])
        if not (root / top).is_dir() or (root / top).is_symlink():
            yield top
            continue
        for folder, dirs, files in os.walk(root / top):
            rel = os.path.relpath(folder, root)
            if rel != ".":
                yield rel
            if rel in excluded:
                dirs[:] = []
                continue
            dirs.sort()
            for name in sorted(files + [d for d in dirs if (Path(folder) / d).is_symlink()]):
                yield os.path.normpath(os.path.join(rel, name))
            dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]


def dir_layer(*, root: Path, out: Path, paths: list[str], exclude: list[str]) -> dict[str, Any]:
    """Write `out` (a gzipped layer tar of `root`, or of `paths` under it) and `out`.json
    with its digest, diff_id and size; returns the latter."""
    excluded = {os.path.normpath(e) for e in exclude}
    tmp = out.with_suffix(".tmp")
    seen: set[str] = set()
    with tmp.open("wb") as raw_file:
        compressed = _Hashing(raw_file)
        with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=6, mtime=0) as gz:
            uncompressed = _Hashing(gz)
            stream: Any = uncompressed
            with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:

                def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
                    info.uname = info.gname = ""
                    return info

                for rel in _walk(root, paths, excluded):
                    if rel in seen or rel == ".":
                        continue
                    seen.add(rel)
                    tar.add(root / rel, arcname=rel, recursive=False, filter=clean)
    meta = {
        "digest": "sha256:" + compressed.sha.hexdigest(),
        "diff_id": "sha256:" + uncompressed.sha.hexdigest(),
        "size": compressed.size,
    }
    tmp.rename(out)
    Path(f"{out}.json").write_text(json.dumps(meta) + "\n")
    return meta


def image(*, layers: list[Path], out: Path, name: str, config: dict[str, Any], history: str) -> None:
    """Stack `layers` (written by `dir_layer`, bottom first) into an image named `name`."""
    metas = [json.loads(Path(f"{path}.json").read_text()) for path in layers]
    blobs: dict[str, bytes | Path] = {m["digest"]: path for m, path in zip(metas, layers, strict=True)}
    image_blobs, entry = _image_blobs(
        normalize(name), config, [(m["digest"], m["diff_id"], m["size"]) for m in metas], history
    )
    blobs.update(image_blobs)
    _write_layout(out, [entry], blobs)


def _layer_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="oci_image.py layer", description=dir_layer.__doc__)
    parser.add_argument("--root", type=Path, required=True, help="the folder that is the layer's /")
    parser.add_argument("--path", action="append", default=[], help="only this path under --root (repeat)")
    parser.add_argument(
        "--exclude-contents", action="append", default=[], help="keep this folder, empty (repeat)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the .tar.gz to write (and .tar.gz.json)")
    args = parser.parse_args(argv)
    dir_layer(root=args.root, out=args.out, paths=args.path, exclude=args.exclude_contents)


def _image_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="oci_image.py image", description=image.__doc__)
    parser.add_argument("--layer", type=Path, action="append", required=True, help="bottom first (repeat)")
    parser.add_argument("--name", required=True, help="the image's name (normalized as runtimes do)")
    parser.add_argument("--entrypoint", action="append", default=[], help="one argument (repeat)")
    parser.add_argument("--cmd", action="append", default=[], help="one argument (repeat)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE (repeat)")
    parser.add_argument("--user", default="", help="uid:gid")
    parser.add_argument("--workdir", default="/")
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE (repeat)")
    parser.add_argument("--history", default="hack/lib/oci_image.py", help="what made it")
    parser.add_argument("--out", type=Path, required=True, help="the OCI layout tarball to write")
    args = parser.parse_args(argv)
    config: dict[str, Any] = {"Env": args.env, "WorkingDir": args.workdir}
    if args.entrypoint:
        config["Entrypoint"] = args.entrypoint
    if args.cmd:
        config["Cmd"] = args.cmd
    if args.user:
        config["User"] = args.user
    if args.label:
        config["Labels"] = dict(label.split("=", 1) for label in args.label)
    image(layers=args.layer, out=args.out, name=args.name, config=config, history=args.history)


def main() -> None:
    if sys.argv[1:2] == ["layer"]:
        _layer_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["image"]:
        _image_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busybox", type=Path, required=True, help="a statically linked busybox")
    parser.add_argument("--out", type=Path, required=True, help="the OCI layout tarball to write")
    parser.add_argument("--name", required=True, help="the workload image's name")
    parser.add_argument("--pause", required=True, help="the sandbox image's name")
    args = parser.parse_args()
    build(busybox=args.busybox, out=args.out, name=args.name, pause=args.pause)


if __name__ == "__main__":
    main()
