"""OutlineDeviceUnits: cut a placed ``main`` into per-device functions (units) and copies."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule

from tvm_hetero.ir.attrs import ENTRY_FUNC
from tvm_hetero.ir.bindings import calls_one_of, calls_op, function_named
from tvm_hetero.ir.units import (
    BindingGraph,
    Unit,
    classify,
    fold_known_items,
    main_bindings,
    rewrite,
)


@tvm.transform.module_pass(opt_level=0, name="OutlineDeviceUnits")
class OutlineDeviceUnits:
    """Outline every run of bindings on one vdevice into a function ``unit{i}_d{k}``.

    ``main`` keeps only calls to the units and the ``R.to_vdevice`` copies between them, so a
    runtime can run each unit on its device's worker as soon as its inputs exist: units on two
    devices with no path between them run at the same time.

    Where a unit starts and ends: a device's bindings are cut before a binding that reads a
    tensor copied from another device (a receive) and after a binding whose tensor is copied to
    another device (a send), unless what follows is a slice sent too: a tile's halos to both of
    its neighbours, the pieces of an input scattered to every device, leave one unit together;
    and a receive does not cut a unit that so far only slices and joins what stays on its
    device: a boundary's joins wait for all their pieces in one unit (:func:`_joins_only`).
    Every input of a unit therefore exists before it starts, and every tensor another device
    waits for leaves at the unit's end. Weight constants, what is computed from constants alone
    (folded transposes) and their ``to_vdevice`` are emitted inside each unit that reads them: a
    weight never travels between units (the deployment build binds it to its device's
    library).

    Notes
    -----
    Precondition: vdevices are declared and every tensor binding of ``main`` carries its vdevice
    (the output of ``PlaceOperators`` or ``RealizeOperatorSplits``); ``main`` has no
    ``match_cast``. Postcondition: each unit is a public function with attribute
    ``tvm_hetero.unit_device`` (its vdevice index); ``main`` computes the same values.

    Examples
    --------
    ``y = matmul(to_vdevice(x, "llvm:1"), w); z = relu(to_vdevice(y, "llvm:0"))`` becomes
    ``y = unit0_d1(to_vdevice(x, "llvm:1")); z = unit1_d0(to_vdevice(y, "llvm:0"))``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with ``main`` cut into units."""
        func = function_named(mod, ENTRY_FUNC, "OutlineDeviceUnits")
        vdevices = list(mod.global_infos.get("vdevice", []))
        if not vdevices:
            raise ValueError("OutlineDeviceUnits: the module declares no vdevices; place it first")
        func = fold_known_items(func)
        bindings = main_bindings(func, "OutlineDeviceUnits")
        graph = classify(func, bindings, vdevices)
        return rewrite(mod, func, bindings, graph, _segment(bindings, graph))


def _segment(bindings: list, g: BindingGraph) -> list[Unit]:
    """Runs of one device's bindings, cut before a receive and after a send; a slice that is
    sent too stays in the unit of the send before it (see :func:`_sent_slice`)."""
    units: list[Unit] = []
    open_unit: dict[int, Unit] = {}
    for b in bindings:
        if b.var in g.const or b.var in g.copies:
            continue
        dev = g.device[b.var]
        reads = relax.analysis.free_vars(b.value)
        received = any(
            v in g.copies or (v not in g.const and g.device.get(v, dev) != dev) for v in reads
        )
        unit = open_unit.get(dev)
        sent_last = unit is not None and unit.bindings[-1].var in g.sent
        cut_for_input = received and not (unit is not None and _joins_only(unit, g))
        if unit is None or cut_for_input or (sent_last and not _sent_slice(b, g)):
            unit = open_unit[dev] = Unit(dev)
            units.append(unit)
        unit.bindings.append(b)
    return units


SLICE_OP = "relax.strided_slice"
MOVES = (SLICE_OP, "relax.concat")
"""Operators that only move data: a boundary's slices and joins."""


def _joins_only(unit: Unit, g: BindingGraph) -> bool:
    """Whether ``unit`` so far only slices and joins tensors that stay on its device: a
    binding that reads a received piece then joins it rather than starting a unit of its own.
    It makes the unit wait for that piece too, which delays only data movement, and nothing of
    the unit has left the device, so the piece cannot depend on it. A tile of a 2 x 2 grid
    joins its pieces in steps (the top strip, the bottom strip, then the two) with pieces read
    in between: three units a boundary, each a call to the worker (0.4-1.9 ms each on ResNet-18
    over four devices), where one does."""
    return all(b.var not in g.sent and calls_one_of(b.value, MOVES) for b in unit.bindings)


def _sent_slice(b: relax.VarBinding, g: BindingGraph) -> bool:
    """Whether ``b`` slices a tensor for another device: the halos a tile sends to both of its
    neighbours, the pieces of an input scattered to every tile. Such a slice joins the unit of
    the send before it, which it delays by a copy of the piece only; a unit of its own cost a
    call to the worker and a return (MobileNet in rows over four devices: 0.6-0.8 ms each on
    the critical path, `benchmarks/README.md`)."""
    return b.var in g.sent and calls_op(b.value, SLICE_OP)
