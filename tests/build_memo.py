"""Builds reused within one test process (the suite's time, not a package feature).

:func:`tvm_hetero.build.multi_device.build` lowers then compiles; both steps are replaced here
by memos keyed by the module's structural hash (``workload_key``; a hit checked by structural
equality), the build options, the pass context's configuration and every upper-case constant
of the package's loaded modules (so ``unittest.mock.patch.object(rules, "SWITCH", ...)``
builds anew). A cached lowered module is handed out as a fresh ``IRModule`` (callers may
update theirs in place).
"""

from __future__ import annotations

import sys
import types
from collections import OrderedDict
from typing import Any

import tvm
import tvm_ffi

from tvm_hetero.build import multi_device
from tvm_hetero.ir.workloads import workload_key

CAPACITY = 64
"""Entries kept by each memo (least recently used dropped first)."""

BUILD_MODULES = ("tvm.", "tvm_hetero.build", "tvm_hetero.schedules", "tvm_hetero.passes",
                 "tvm_hetero.pipelines", "tvm_hetero.ir")  # fmt: skip
"""Where a patched function may change what a build makes (constants are in every key)."""


def never() -> bool:
    return False


bypass = never
"""Asked at each build: True builds anew (the conftest sets it while a test patches)."""


def changes_builds(monkeypatch: Any) -> bool:
    """Whether ``monkeypatch`` (pytest's) holds a patch that may change a build: any item or
    environment variable set, or a lower-case attribute of TVM or of the package's build,
    schedule, pass, pipeline or IR modules (or of a class defined there)."""
    if monkeypatch._setitem:
        return True
    for target, name, _ in monkeypatch._setattr:
        module = isinstance(target, types.ModuleType)
        where = (target.__name__ if module else getattr(target, "__module__", "")) or ""
        if not name.isupper() and f"{where}.".startswith(BUILD_MODULES):
            return True
    return False


_lowered: OrderedDict[tuple, tuple[tvm.IRModule, tvm.IRModule]] = OrderedDict()
_compiled: OrderedDict[tuple, tuple[tvm.IRModule, Any]] = OrderedDict()
_lower, _compile = multi_device.lower, multi_device._compile


def _constants() -> int:
    """A hash of the package's upper-case module constants as they are now."""
    items = []
    for name, module in list(sys.modules.items()):
        if name.startswith("tvm_hetero.") and module is not None:
            for key, value in vars(module).items():
                if key.isupper() and isinstance(value, int | float | str | tuple | frozenset):
                    items.append((name, key, repr(value)))
    return hash(tuple(items))


def _key(mod: tvm.IRModule, *extra: Any) -> tuple:
    context = tvm.transform.PassContext.current()
    config = repr(sorted((str(k), str(v)) for k, v in context.config.items()))
    return (workload_key(mod), context.opt_level, config, _constants(), *extra)


def _memo(table: OrderedDict, key: tuple, mod: tvm.IRModule, make) -> Any:
    hit = table.get(key)
    if hit is not None and tvm_ffi.structural_equal(hit[0], mod, map_free_vars=True):
        table.move_to_end(key)
        return hit[1]
    value = make()
    table[key] = (mod, value)
    if len(table) > CAPACITY:
        table.popitem(last=False)
    return value


def lower(mod: tvm.IRModule, options: multi_device.BuildOptions | None = None) -> tvm.IRModule:
    options = options or multi_device.BuildOptions()
    if bypass() or options.conv_cache:
        return _lower(mod, options)
    done = _memo(_lowered, _key(mod, options), mod, lambda: _lower(mod, options))
    return tvm.IRModule(dict(done.functions_items()), attrs=done.attrs,
                        global_infos=dict(done.global_infos.items()))  # fmt: skip


def compile_(lowered: tvm.IRModule, cuda_graph: bool) -> Any:
    if bypass():
        return _compile(lowered, cuda_graph)
    return _memo(_compiled, _key(lowered, cuda_graph), lowered,
                 lambda: _compile(lowered, cuda_graph))  # fmt: skip


multi_device.lower, multi_device._compile = lower, compile_
