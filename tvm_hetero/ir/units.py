"""Cut a placed ``main`` into units: the machinery both unit passes share.

A unit is a group of bindings outlined into a function on one device; ``main`` is left calling
the units and the ``R.to_vdevice`` copies between them. Which bindings form a unit is the passes'
choice (``OutlineDeviceUnits``: runs of one device; ``OutlineSubgraphUnits``: a plan's subgraphs);
what is a constant, a copy or a computation, and how the outlined module is written, is here.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import tvm
from tvm import relax
from tvm.ir import IRModule

from tvm_hetero._compat import TensorType, TupleType, vdevice_equal
from tvm_hetero.ir.attrs import COPY_OP, ENTRY_FUNC, UNIT_DEVICE_ATTR
from tvm_hetero.ir.bindings import calls_op, iter_bindings
from tvm_hetero.ir.outline import emit_group, leaf_inputs


def main_bindings(func: relax.Function, owner: str) -> list[relax.VarBinding]:
    """The bindings of ``main`` in program order; ``owner`` (the pass) names the error.

    Raises
    ------
    ValueError
        For a ``match_cast`` (symbolic shapes), which units do not support.
    """
    inside = shape_computed_inside(func)
    if inside is not None:
        raise ValueError(
            f"{owner}: MatchCast of {inside!r} in main is not "
            "supported (symbolic shapes); compile for one device instead"
        )
    return [b for _, _, b in iter_bindings(func)]


def shape_computed_inside(func: relax.Function) -> str | None:
    """The name of the first value whose shape ``func`` computes itself (a ``match_cast``:
    sizes read from a tensor at run time, as a mixture of experts' routed rows), which
    :func:`main_bindings` refuses; None where every shape is known from the inputs."""
    for _, _, b in iter_bindings(func):
        if not isinstance(b, relax.VarBinding):
            return str(b.var.name)
    return None


def fold_known_items(func: relax.Function) -> relax.Function:
    """``func`` with each item of a tuple that ``main`` builds itself (``t = (a, b); u = t[1]``)
    read as the field (``u = b``), and a built tuple no longer read dropped.

    A tuple gathered from values on several devices takes the first one's device; an item of
    it that lives on another device would then be a unit of its own reading the whole tuple
    from the first device: between two local CPUs a shared object, but no worker can send a
    tuple to another box (DUET's plan for MT-DNN, whose ten heads' results ``main`` gathered in
    a tuple and then returned item by item, failed on remote workers that way).
    """
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return func
    built: dict[relax.Var, relax.Tuple] = {}
    alias: dict[relax.Var, relax.Expr] = {}
    blocks, folded = [], False
    for block in body.blocks:
        bindings = []
        for b in block.bindings:
            value = b.value if isinstance(b, relax.VarBinding) else None
            if isinstance(value, relax.Var):
                alias[b.var] = alias.get(value, value)
            elif isinstance(value, relax.Tuple):
                built[b.var] = value
            elif isinstance(value, relax.TupleGetItem):
                tup = alias.get(value.tuple_value, value.tuple_value)
                if tup in built:
                    field_ = built[tup].fields[value.index]
                    b, folded = relax.VarBinding(b.var, field_), True
                    if isinstance(field_, relax.Var):
                        alias[b.var] = alias.get(field_, field_)
            bindings.append(b)
        blocks.append(bindings)
    if not folded:
        return func
    read = set(relax.analysis.free_vars(body.body))
    for bindings in reversed(blocks):  # drop built tuples (and chains) nothing reads now
        kept = []
        for b in reversed(bindings):
            if b.var in built and b.var not in read:
                continue
            read |= set(relax.analysis.free_vars(b.value))
            kept.append(b)
        bindings[:] = reversed(kept)
    new_blocks = [type(old)(bindings) for old, bindings in zip(body.blocks, blocks, strict=True)]
    return relax.Function(
        func.params, relax.SeqExpr(new_blocks, body.body), func.ret_ty,
        func.is_pure, func.attrs, func.span,
    )  # fmt: skip


@dataclass
class BindingGraph:
    """What each binding of ``main`` is: constant, copy or computation on a device."""

    device: dict[relax.Var, int] = field(default_factory=dict)
    const: set[relax.Var] = field(default_factory=set)
    copies: set[relax.Var] = field(default_factory=set)
    alias: dict[relax.Var, relax.Expr] = field(default_factory=dict)
    sent: set[relax.Var] = field(default_factory=set)


@dataclass
class Unit:
    """Bindings outlined together into one function on one device."""

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
    raise ValueError(f"vdevice {ty.vdevice} is not declared")


def classify(func: relax.Function, bindings: list, vdevices: list) -> BindingGraph:
    g = BindingGraph()
    for p in func.params:
        g.device[p] = _index_of(p.ty, vdevices) or 0
    for b in bindings:
        reads = [v for v in relax.analysis.free_vars(b.value)]
        if calls_op(b.value, COPY_OP):
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


def rewrite(
    mod: IRModule, func: relax.Function, bindings: list, g: BindingGraph, units: list[Unit]
) -> IRModule:
    """``mod`` with each unit outlined into ``unit{i}_d{device}`` and ``main`` calling the units
    and the copies between them, in an order where every value exists before it is read (program
    order where it allows).

    Raises
    ------
    ValueError
        If two units read each other's results (a path leaves a unit and comes back into it).
    """
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
    tuples = result_tuples(bindings, g, unit_of)
    inline = {b.var: b.value for b in bindings if b.var in tuples}
    final = set(relax.analysis.free_vars(func.body.body))
    final |= {v for t in inline.values() for v in relax.analysis.free_vars(t)}
    top = relax.BlockBuilder()
    attrs = dict(func.attrs) if func.attrs else None
    with top.function(ENTRY_FUNC, list(func.params), attrs=attrs):
        with top.dataflow():
            for kind, item in _call_order(bindings, g, unit_of, calls):
                if kind == "unit":
                    _emit_call(top, calls[item], remap, final)
                    continue
                src = remap.get(item.value.args[0], item.value.args[0])
                emit = top.emit_output if item.var in final else top.emit
                remap[item.var] = emit(
                    relax.Call(item.value.op, [src], item.value.attrs), name_hint=str(item.var.name)
                )
            out = _substitute_result(func.body.body, remap, inline)
            if not isinstance(out, relax.Var) and not inline:
                out = top.emit_output(out)
        top.emit_func_output(out)
    bb.update_func(bb.get().get_global_var(ENTRY_FUNC), top.get()[ENTRY_FUNC])
    return bb.get()


def _call_order(bindings: list, g: BindingGraph, unit_of: dict, calls: dict) -> list[tuple]:
    """Unit calls and copies of ``main`` in dependency order; ties go to program order."""
    items: dict = {}  # item -> position of its first binding
    for pos, b in enumerate(bindings):
        i = unit_of.get(b.var)
        if i is not None and i in calls:
            items.setdefault(("unit", i), pos)
        elif b.var in g.copies:
            items[("copy", b)] = pos
    made_by = {b.var: ("copy", b) for b in bindings if b.var in g.copies}
    made_by |= {v: ("unit", i) for v, i in unit_of.items() if i in calls}
    needs: dict = {}
    for item in items:
        kind, x = item
        reads = calls[x][1] if kind == "unit" else [x.value.args[0]]
        needs[item] = {made_by[v] for v in reads if v in made_by and made_by[v] != item}
    order, done = [], set()
    ready = [(pos, n, item) for n, (item, pos) in enumerate(items.items()) if not needs[item]]
    number = {item: n for n, item in enumerate(items)}
    heapq.heapify(ready)
    while ready:
        _, _, item = heapq.heappop(ready)
        order.append(item)
        done.add(item)
        for other in items:
            if other not in done and item in needs[other]:
                needs[other].discard(item)
                if not needs[other]:
                    heapq.heappush(ready, (items[other], number[other], other))
    if len(order) < len(items):
        stuck = sorted(f"unit {x}" for kind, x in items if kind == "unit" and (kind, x) not in done)
        raise ValueError(
            f"units {', '.join(stuck)} read each other's results: a path leaves a unit and comes "
            "back into it; cut the program so that each unit's inputs exist before it starts"
        )
    return order


def _add_unit(bb, mod, unit: Unit, name: str, outputs: list, g: BindingGraph, by_var: dict):
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
            # kernels go straight to the module's builder, so the unit calls them by its names
            out = emit_group(sub, consts + unit_bindings, outputs, dict(params), mod, _same, bb)
        sub.emit_func_output(out)
    fn = sub.get()[name].with_attrs({"global_symbol": name, UNIT_DEVICE_ATTR: unit.device})
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


def result_tuples(bindings: list, g: BindingGraph, unit_of: dict) -> set[relax.Var]:
    """Tuples in no unit (the function's result gathered from several units): ``main`` builds
    them itself rather than a unit that would wait for all of them.

    Raises
    ------
    ValueError
        For any other binding left out of every unit.
    """
    out = set()
    for b in bindings:
        if b.var in unit_of or b.var in g.copies or b.var in g.const:
            continue
        if not isinstance(b.value, relax.Tuple):
            raise ValueError(f"binding {b.var.name!r} is in no unit")
        out.add(b.var)
    return out


def _substitute_result(expr: relax.Expr, remap: dict, inline: dict) -> relax.Expr:
    if isinstance(expr, relax.Var) and expr in inline:
        expr = inline[expr]
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_substitute_result(f, remap, inline) for f in expr.fields])
    return remap.get(expr, expr)


def group_of(groups: Sequence[Sequence[str]], who: str, what: str) -> dict[str, int]:
    """Operator id -> index of its group; an operator in two groups is a ``ValueError`` naming
    the pass ``who`` and the groups (``what``: "subgraphs", "stages")."""
    found: dict[str, int] = {}
    for k, nodes in enumerate(groups):
        for node in nodes:
            if node in found:
                raise ValueError(f"{who}: operator {node!r} is in {what} {found[node]} and {k}")
            found[node] = k
    return found
