"""``tvm-hetero bundle``: compiled models and the runtime alone, for a GPU or edge box."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero.cli.common import console


def run(args: argparse.Namespace) -> int:
    """Check every path first, then write the bundle (a folder or a ``.tar.xz``)."""
    from tvm_hetero.bundle import make_bundle

    output = Path(args.bundle_output)
    if output.exists():
        raise ValueError(f"-o {str(output)!r}: already exists; give a new name")
    if not output.parent.is_dir():
        raise ValueError(f"-o {str(output)!r}: its folder does not exist")
    from tvm_hetero.runtime.deployment import read_manifest

    for artifact in args.artifacts:
        if not Path(artifact).exists():
            raise ValueError(f"{artifact!r} does not exist (a compiled model or a folder)")
        if Path(artifact).is_file():
            read_manifest(artifact)  # a compiled model, or one line saying what it is not
    with console().status("bundling") as status:
        make_bundle(args.artifacts, output, args.python, lambda what: status.update(what))
    size = sum(f.stat().st_size for f in output.rglob("*") if f.is_file()) if output.is_dir() else 0
    size = size or output.stat().st_size
    console().print(f"wrote {output} ({size / 2**20:.1f} MiB, for Python {args.python})")
    where = output.name.removesuffix(".tar.xz")
    console().print(
        f"on the box: {where}/tvm-hetero run {where}/artifacts/MODEL.tar --print-time "
        f"(PYTHON=python{args.python} picks the interpreter)"
    )
    return 0
