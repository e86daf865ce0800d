"""OutlineSubgraphUnits: each of a plan's subgraphs becomes a function of its own on its device."""

from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm import relax
from tvm.ir import IRModule

from tvm_hetero.ir.attrs import COPY_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import function_named, op_bindings
from tvm_hetero.ir.units import (
    BindingGraph,
    Unit,
    classify,
    fold_known_items,
    group_of,
    main_bindings,
    rewrite,
)


@tvm.transform.module_pass(opt_level=0, name="OutlineSubgraphUnits")
class OutlineSubgraphUnits:
    """Outline each subgraph (a list of operator ids) into a function ``unit{k}_d{device}``.

    DUET's units: a subgraph is a coarse piece of the model (a branch of a multi-path phase, or a
    sequential phase) that the compiler fuses as a whole and the runtime runs on one device's
    worker, at the same time as the subgraphs of other devices. Unlike ``OutlineDeviceUnits``,
    two subgraphs on one device stay two units, so the runtime can start either as soon as its
    own inputs exist.

    Parameters
    ----------
    subgraphs : sequence of sequence of str
        Operator ids (``OpGraph`` ids of the unplaced model) of each subgraph. An operator in no
        subgraph, and tuple plumbing, joins the unit of the first value it reads on its own
        device (a unit of its own when there is none); a tuple of results from several units is
        built by ``main``. Weights and what is computed from weights alone are emitted inside
        every unit that reads them, and copies stay in ``main``, as in ``OutlineDeviceUnits``.

    Notes
    -----
    Precondition: the module is placed (every binding carries its vdevice: ``PlaceOperators``
    then ``RealizeVDevice``), and every subgraph's operators are on one device. Postcondition:
    ``main`` calls the units and the copies between them in an order where every value exists
    before it is read, and computes the same values.

    Raises
    ------
    ValueError
        For an id the module does not have, an operator in two subgraphs, a subgraph whose
        operators are on two devices, or subgraphs that read each other's results.
    """

    def __init__(self, subgraphs: Sequence[Sequence[str]]) -> None:
        self.subgraphs = [list(s) for s in subgraphs]
        self.group = group_of(self.subgraphs, "OutlineSubgraphUnits", "subgraphs")

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with ``main`` cut into one unit per subgraph."""
        func = function_named(mod, ENTRY_FUNC, "OutlineSubgraphUnits")
        vdevices = list(mod.global_infos.get("vdevice", []))
        if not vdevices:
            raise ValueError("OutlineSubgraphUnits: the module declares no vdevices; place it")
        ids = {b.var: b.node_id for b in op_bindings(func, frozenset({COPY_OP}))}
        unknown = sorted(set(self.group) - set(ids.values()))
        if unknown:
            raise ValueError(f"OutlineSubgraphUnits: unknown operator id(s) {unknown[:5]}")
        func = fold_known_items(func)
        bindings = main_bindings(func, "OutlineSubgraphUnits")
        graph = classify(func, bindings, vdevices)
        units = self._units(bindings, graph, ids, func.body.body)
        return rewrite(mod, func, bindings, graph, units)

    def _units(self, bindings: list, g: BindingGraph, ids: dict, result: relax.Expr) -> list[Unit]:
        units: dict[int, Unit] = {}
        unit_of: dict[relax.Var, int] = {}
        extra = len(self.subgraphs)
        read = {v for b in bindings for v in relax.analysis.free_vars(b.value)}
        result_only = set(relax.analysis.free_vars(result)) - read
        for b in bindings:
            if b.var in g.const or b.var in g.copies:
                continue
            k = self.group.get(ids.get(b.var, ""))
            if k is None and isinstance(b.value, relax.Tuple) and b.var in result_only:
                continue  # the result gathered from several units: main builds it
            if k is None:  # plumbing (tuples, items) or an operator in no subgraph
                dev = g.device[b.var]
                reads = [
                    unit_of[v]
                    for v in relax.analysis.free_vars(b.value)
                    if v in unit_of and units[unit_of[v]].device == dev
                ]
                k = reads[0] if reads else None
            if k is None:
                k, extra = extra, extra + 1
            unit = units.setdefault(k, Unit(g.device[b.var]))
            if unit.device != g.device[b.var]:
                raise ValueError(
                    f"OutlineSubgraphUnits: subgraph {k} has operators on vdevices {unit.device} "
                    f"and {g.device[b.var]} ({ids.get(b.var, b.var.name)!s}); place each subgraph "
                    "on one device"
                )
            unit.bindings.append(b)
            unit_of[b.var] = k
        return [units[k] for k in sorted(units)]
