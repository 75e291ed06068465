"""``draco crds``: print the CustomResourceDefinitions, or write one file per kind.

draco crds            all CRDs as one multi-document YAML stream on stdout
draco crds -o crds    one file per kind into the folder ``crds`` (created if missing)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from draco.api.crds import generate_crds

__all__ = ["dump_crd", "main"]


def dump_crd(crd: dict[str, Any]) -> str:
    """The YAML text a CRD is written as (stable: the test compares files byte for byte)."""
    return yaml.safe_dump(crd, sort_keys=False, default_flow_style=False, width=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="draco crds", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("-o", "--output-dir", type=Path, help="write one YAML file per kind into this folder")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    crds = generate_crds()
    if args.output_dir is None:
        sys.stdout.write("---\n".join(dump_crd(crd) for crd in crds.values()))
        return 0
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for file_name, crd in crds.items():
        (args.output_dir / file_name).write_text(dump_crd(crd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
