"""AnnotateOperatorSplits: record on the function how each key operator is cut among devices."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import tvm
from tvm.ir import IRModule

from tvm_hetero.ir.attrs import ENTRY_FUNC, SPLITS_ATTR
from tvm_hetero.ir.bindings import function_named, op_bindings
from tvm_hetero.ir.split_dims import devices_used, split_dims


@tvm.transform.module_pass(opt_level=0, name="AnnotateOperatorSplits")
class AnnotateOperatorSplits:
    """Annotate each planned operator with its partition dimension and device shares.

    Parameters
    ----------
    splits : Mapping[str, Mapping]
        Op node id -> ``{"dim": name, "shares": [units on vdevice 0, on vdevice 1, ...]}``
        (``SplitPlan.annotations()``). Dimensions are those of
        :func:`tvm_hetero.ir.split_dims.split_dims`; shares sum to the dimension's extent; a
        list shorter than the vdevices leaves the rest out.
    func_name : str
        The function to annotate.

    Notes
    -----
    Postcondition: the function carries ``SPLITS_ATTR`` (JSON text) with exactly the checked
    entries; the IR is otherwise unchanged. ``RealizeOperatorSplits`` rewrites it.
    """

    def __init__(self, splits: Mapping[str, Mapping[str, Any]], func_name: str = ENTRY_FUNC):
        self.splits = {}
        for node, entry in splits.items():
            try:
                self.splits[str(node)] = {
                    "dim": str(entry["dim"]), "shares": [int(x) for x in entry["shares"]]
                }  # fmt: skip
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(
                    f"AnnotateOperatorSplits: the entry of operator {node!r} must be "
                    f'{{"dim": NAME, "shares": [units per device]}}, got {entry!r}'
                ) from err
        self.func_name = func_name

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Check the plan against the operators and attach it; ``mod`` is left unchanged."""
        func = function_named(mod, self.func_name, "AnnotateOperatorSplits")
        calls = {b.node_id: b.call for b in op_bindings(func)}
        for node, entry in self.splits.items():
            _check(node, entry, calls)
        needed = max((devices_used(e["shares"]) for e in self.splits.values()), default=1)
        declared = len(mod.global_infos.get("vdevice", []))
        if needed > 1 and declared < needed:
            raise ValueError(
                f"AnnotateOperatorSplits: the shares use {needed} devices and the module declares "
                f"{declared} vdevices; run DeclareVDevices with every device first"
            )
        out = mod.clone()
        out[self.func_name] = func.with_attr(SPLITS_ATTR, json.dumps(self.splits, sort_keys=True))
        return out


def _check(node: str, entry: Mapping[str, Any], calls: Mapping) -> None:
    if node not in calls:
        raise ValueError(f"AnnotateOperatorSplits: unknown operator id {node!r}; see OpGraph ids")
    dims = split_dims(calls[node])
    dim = dims.get(entry["dim"])
    if dim is None:
        raise ValueError(
            f"AnnotateOperatorSplits: operator {node!r} ({calls[node].op}) cannot be cut along "
            f"{entry['dim']!r}; allowed: {sorted(dims) or 'none'}"
        )
    shares = entry["shares"]
    if not shares or min(shares) < 0 or sum(shares) != dim.extent:
        raise ValueError(
            f"AnnotateOperatorSplits: operator {node!r} has shares {shares} along "
            f"{dim.name!r}; give a non-negative unit count per device that sum to {dim.extent}"
        )
