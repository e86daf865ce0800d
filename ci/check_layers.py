"""The package's layers, bottom to top, and the check that each module imports only its own
layer and those below it (every import counts, at module level or inside a function).

Run as ``python ci/check_layers.py`` (``make lint`` does); ``violations(root)`` is what the
test calls, on the package and on a copy with a deliberate violation.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("records", ("errors", "records", "devices.spec", "ir.attrs", "runtime.inputs")),
    ("runtime", ("runtime",)),
    ("graph", ("_compat", "ir", "devices", "plan", "viz")),
    ("lowering", ("schedules", "costmodel", "passes", "pipelines", "frontends", "zoo")),
    ("build", ("build",)),
    ("profiling", ("profiling",)),
    ("strategies", ("strategies",)),
    ("optimize", ("optimize",)),
    ("api", ("api",)),
    ("commands", ("cli", "bundle", "emulation")),
]  # fmt: skip
"""Layer name and the modules or packages in it (relative to ``tvm_hetero``); the most
specific prefix decides a module's layer."""


RUNTIME_ONLY = ("records", "runtime")
"""Layers a GPU or edge box imports with the TVM runtime alone: no TVM compiler module."""

COMPILER = ("relax", "tir", "tirx", "s_tir", "te", "script", "target", "meta_schedule",
            "dlight", "topi", "driver")  # fmt: skip
"""``tvm.<name>`` modules that the runtime-only TVM lacks."""


def layer_of(module: str) -> int | None:
    """The layer index of ``tvm_hetero.<module>``, by its longest listed prefix."""
    best, found = -1, None
    for k, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), k
    return found


def imports(path: Path, package: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of ``package``'s modules in ``path`` (relative to
    the package, e.g. ``ir.opgraph``; TVM's as ``tvm.relax``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == package:  # from tvm_hetero import api
                names = [f"{package}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "tvm":  # from tvm import relax
            names = [f"tvm.{a.name}" for a in node.names]
        found += [(node.lineno, n.removeprefix(package + ".")) for n in names
                  if n.startswith((package + ".", "tvm."))]  # fmt: skip
    return found


def violations(root: Path, package: str = "tvm_hetero") -> list[str]:
    """Every import of a higher layer, and every module no layer holds, under ``root`` (the
    package's folder)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        module = ".".join(p for p in rel.parts if p != "__init__")
        if not module:
            continue
        mine = layer_of(module)
        if mine is None:
            out.append(f"{path}: module {module} is in no layer (add it to LAYERS)")
            continue
        for line, target in imports(path, package):
            if target.startswith("tvm."):
                if LAYERS[mine][0] in RUNTIME_ONLY and target.split(".")[1] in COMPILER:
                    out.append(f"{path}:{line}: {module} ({LAYERS[mine][0]}) imports {target}, "
                               "which the runtime-only TVM lacks")  # fmt: skip
                continue
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                out.append(
                    f"{path}:{line}: {module} ({LAYERS[mine][0]}) imports {target} "
                    f"({LAYERS[theirs][0]}), a layer above it"
                )
    return out


def main() -> int:
    """Print the violations; exit 1 when there are any."""
    found = violations(Path(__file__).resolve().parent.parent / "tvm_hetero")
    for line in found:
        print(line)
    print(f"layers: {len(found)} violation(s)" if found else "layers: every import goes down")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
