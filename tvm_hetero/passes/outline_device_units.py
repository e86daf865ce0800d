"""OutlineDeviceUnits: cut a placed ``main`` into per-device functions (units) and copies."""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax
from tvm.ir import IRModule

from tvm_hetero._compat import TensorType, TupleType, vdevice_equal
from tvm_hetero.ir.attrs import COPY_OP, ENTRY_FUNC, UNIT_DEVICE_ATTR
from tvm_hetero.ir.bindings import function_named, iter_bindings
from tvm_hetero.ir.outline import emit_group, leaf_inputs


@tvm.transform.module_pass(opt_level=0, name="OutlineDeviceUnits")
class OutlineDeviceUnits:
    """Outline every run of bindings on one vdevice into a function ``unit{i}_d{k}``.

    ``main`` keeps only calls to the units and the ``R.to_vdevice`` copies between them, so a
    runtime can run each unit on its device's worker as soon as its inputs exist: units on two
    devices with no path between them run at the same time.

    Where a unit starts and ends: a device's bindings are cut before a binding that reads a
    tensor copied from another device (a receive) and after a binding whose tensor is copied to
    another device (a send). Every input of a unit therefore exists before it starts, and every
    tensor another device waits for leaves at the unit's end. Weight constants, what is computed
    from constants alone (folded transposes) and their ``to_vdevice`` are emitted inside each unit
    that reads them: a weight never travels between units (the deployment build binds it to its
    device's library).

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
        bindings = []
        for _, _, b in iter_bindings(func):
            if not isinstance(b, relax.VarBinding):
                raise ValueError(
                    f"OutlineDeviceUnits: {type(b).__name__} of {b.var.name!r} in main is not "
                    "supported (symbolic shapes); compile for one device instead"
                )
            bindings.append(b)
        graph = _classify(func, bindings, vdevices)
        units = _segment(bindings, graph, func.body.body)
        return _rewrite(mod, func, bindings, graph, units)


@dataclass
class _Graph:
    """What each binding of ``main`` is: constant, copy or computation on a device."""

    device: dict[relax.Var, int] = field(default_factory=dict)
    const: set[relax.Var] = field(default_factory=set)
    copies: set[relax.Var] = field(default_factory=set)
    alias: dict[relax.Var, relax.Expr] = field(default_factory=dict)
    sent: set[relax.Var] = field(default_factory=set)


@dataclass
class _Unit:
    device: int
    bindings: list[relax.VarBinding] = field(default_factory=list)


def _index_of(ty: relax.Type, vdevices: list) -> int | None:
    if isinstance(ty, TupleType):
        for f in ty.fields:
            found = _index_of(f, vdevices)
            if found is not None:
                return found
        return None
    if not isinstance(ty, TensorType) or ty.vdevice is None:
        return None
    for i, v in enumerate(vdevices):
        if vdevice_equal(v, ty.vdevice):
            return i
    raise ValueError(f"OutlineDeviceUnits: vdevice {ty.vdevice} is not declared")


def _is_copy(value: relax.Expr) -> bool:
    return (
        isinstance(value, relax.Call)
        and isinstance(value.op, tvm.ir.Op)
        and (value.op.name == COPY_OP)
    )


def _classify(func: relax.Function, bindings: list, vdevices: list) -> _Graph:
    g = _Graph()
    for p in func.params:
        g.device[p] = _index_of(p.ty, vdevices) or 0
    for b in bindings:
        reads = [v for v in relax.analysis.free_vars(b.value)]
        if _is_copy(b.value):
            src = b.value.args[0]
            if isinstance(src, tvm.ir.expr.Constant) or src in g.const:
                g.const.add(b.var)  # a weight for its consumer: copied into the unit with it
                continue
            dst = _index_of(b.var.ty, vdevices)
            if dst == g.device[src]:
                g.device[b.var] = dst
                g.alias[b.var] = src
                continue
            g.copies.add(b.var)
            g.sent.add(src)
            g.device[b.var] = dst
            continue
        if all(v in g.const for v in reads):
            g.const.add(b.var)
            continue
        found = _index_of(b.var.ty, vdevices)
        if found is None:  # no tensor result (shape ops): where its first input lives
            found = next(g.device[v] for v in reads if v not in g.const)
        g.device[b.var] = found
    return g


def _segment(bindings: list, g: _Graph, result: relax.Expr) -> list[_Unit]:
    units: list[_Unit] = []
    open_unit: dict[int, _Unit] = {}
    for b in bindings:
        if b.var in g.const or b.var in g.copies:
            continue
        dev = g.device[b.var]
        reads = relax.analysis.free_vars(b.value)
        received = any(
            v in g.copies or (v not in g.const and g.device.get(v, dev) != dev) for v in reads
        )
        unit = open_unit.get(dev)
        if unit is None or received:
            unit = open_unit[dev] = _Unit(dev)
            units.append(unit)
        unit.bindings.append(b)
        if b.var in g.sent:
            del open_unit[dev]
    return units


def _rewrite(mod: IRModule, func: relax.Function, bindings: list, g: _Graph, units: list):
    by_var = {b.var: b for b in bindings}
    unit_of = {b.var: i for i, u in enumerate(units) for b in u.bindings}
    readers: dict[relax.Var, set] = {}
    for b in bindings:
        owner = unit_of.get(b.var, "main")
        for v in relax.analysis.free_vars(b.value):
            readers.setdefault(v, set()).add(owner)
    for v in relax.analysis.free_vars(func.body.body):
        readers.setdefault(v, set()).add("main")
    bb = relax.BlockBuilder(mod)
    calls = {}
    for i, unit in enumerate(units):
        outputs = [b.var for b in unit.bindings if readers.get(b.var, set()) - {i}]
        if not outputs:  # nothing reads it: dead code
            continue
        gv, params = _add_unit(bb, mod, unit, f"unit{i}_d{unit.device}", outputs, g, by_var)
        calls[i] = (gv, params, outputs)
    remap: dict = {}
    final = set(relax.analysis.free_vars(func.body.body))
    top = relax.BlockBuilder()
    attrs = dict(func.attrs) if func.attrs else None
    with top.function(ENTRY_FUNC, list(func.params), attrs=attrs):
        with top.dataflow():
            emitted = set()
            for b in bindings:
                i = unit_of.get(b.var)
                if i is not None and i in calls and i not in emitted:
                    emitted.add(i)
                    _emit_call(top, calls[i], remap, final)
                elif b.var in g.copies:
                    src = remap.get(b.value.args[0], b.value.args[0])
                    emit = top.emit_output if b.var in final else top.emit
                    remap[b.var] = emit(
                        relax.Call(b.value.op, [src], b.value.attrs), name_hint=str(b.var.name)
                    )
            out = _substitute_result(func.body.body, remap)
            out = top.emit_output(out) if not isinstance(out, relax.Var) else out
        top.emit_func_output(out)
    bb.update_func(bb.get().get_global_var(ENTRY_FUNC), top.get()[ENTRY_FUNC])
    return bb.get()


def _add_unit(bb, mod, unit: _Unit, name: str, outputs: list, g: _Graph, by_var: dict):
    """Add the unit's function; constants it reads (and their chains) are emitted inside."""
    inside = {b.var for b in unit.bindings}
    needed_consts: list = []
    params: dict[relax.Var, relax.Var] = {}

    def need(v: relax.Var) -> None:
        if v in g.const:
            if v in by_var and v not in needed_consts:
                for w in relax.analysis.free_vars(by_var[v].value):
                    need(w)
                needed_consts.append(v)
        elif v not in inside and v not in params:
            params[v] = relax.Var(str(v.name), v.ty)

    for b in unit.bindings:
        for e in leaf_inputs(b.value):
            if isinstance(e, relax.Var):
                need(e)
    order = {b.var: k for k, b in enumerate(by_var.values())}
    body = sorted([by_var[v] for v in needed_consts], key=lambda b: order[b.var])
    consts = body
    unit_bindings = [
        relax.VarBinding(b.var, g.alias[b.var]) if b.var in g.alias else b for b in unit.bindings
    ]
    sub = relax.BlockBuilder()
    with sub.function(name, list(params.values())):
        with sub.dataflow():
            out = emit_group(sub, consts + unit_bindings, outputs, dict(params), mod, _same)
        sub.emit_func_output(out)
    fn = sub.get()[name]
    for gv, f in sub.get().functions_items():
        if gv.name_hint != name:
            bb.add_func(f, gv.name_hint)
    fn = fn.with_attrs({"global_symbol": name, UNIT_DEVICE_ATTR: unit.device})
    return bb.add_func(fn, name), list(params)


def _same(ty: relax.Type) -> relax.Type:
    return ty


def _emit_call(bb, call, remap: dict, final: set) -> None:
    """The unit's call in ``main``; what ``main`` returns is emitted as a dataflow output."""
    gv, params, outputs = call
    args = [remap.get(p, p) for p in params]

    def emit(value, var):
        return (bb.emit_output if var in final else bb.emit)(value, name_hint=str(var.name))

    if len(outputs) == 1:
        remap[outputs[0]] = emit(relax.Call(gv, args), outputs[0])
        return
    tup = bb.emit(relax.Call(gv, args), name_hint=f"{gv.name_hint}_out")
    for k, v in enumerate(outputs):
        remap[v] = emit(relax.TupleGetItem(tup, k), v)


def _substitute_result(expr: relax.Expr, remap: dict) -> relax.Expr:
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_substitute_result(f, remap) for f in expr.fields])
    return remap.get(expr, expr)
