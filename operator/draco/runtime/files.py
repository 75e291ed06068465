"""Files draco writes: replaced atomically, with their mode from the first byte; those with
secrets in them readable by their owner only.

Every file draco writes that holds a credential or a key (private keys, kubeconfigs), and
the agent's checkpoint records (which claims of which namespaces a node prepared), go through
`write_private`: the data lands in a temporary file created with mode 0600 in the target's
folder (whatever the umask), is flushed to disk, and replaces the target atomically, so a
reader never sees half a file and nobody else ever sees any of it (a chmod after writing
leaves a moment in which the file is readable by everyone). A target that existed with a
wider mode is replaced, not rewritten in place, so it ends 0600 too. Files others must read
(certificates, CDI specs, device metadata) go through `replace_file` with their mode, set
on the temporary file before the rename.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["PRIVATE_MODE", "PUBLIC_MODE", "replace_file", "write_private"]

#: Owner read and write, nothing for anyone else.
PRIVATE_MODE: Final = 0o600
#: Everyone reads, the owner writes.
PUBLIC_MODE: Final = 0o644


def replace_file(path: Path, data: bytes, *, mode: int, sync: bool = True) -> Path:
    """Replace `path` with `data` so that readers see the old or the new content only, with
    `mode` set before the rename; `sync`: flushed to disk first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file O_EXCL with mode 0600, independent of the umask.
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if sync:
                os.fsync(out.fileno())
            if mode != PRIVATE_MODE:
                os.fchmod(out.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path


def write_private(path: Path, data: bytes, *, sync: bool = True) -> Path:
    """Replace `path` with `data`, readable and writable by its owner only (0600)."""
    return replace_file(path, data, mode=PRIVATE_MODE, sync=sync)
