"""Spatial tiles (FlexPie's partition schemes): which part of a tensor each device computes, and
what part of each input an operator needs for a part of its output (the halo).

A :class:`Box` is a half-open range per axis. :func:`scheme_cells` cuts a layer's NCHW output
over the devices by a scheme: ``InH`` (rows), ``InW`` (columns), ``OutC`` (output channels),
``Grid`` (a 2 x ceil(D/2) grid of rows and columns, devices in snake order, down the first
column and up the next, so that devices next in the list, a ring's neighbours, hold cells that
share an edge: on a ring of four the 2-hop pairs share a corner only; with an odd device
count the last device takes both cells of its column, twice the work, as in the paper's 3-node
runs) or ``Home`` (the whole output on the home device: any layer can take it).
:func:`needs` maps an output box back to the input boxes through one operator: convolution and
pooling windows with their stride, dilation and padding, depthwise convolutions' channels,
element-wise broadcasting. Read-only analysis of static-shaped calls; the rewriting is
``PartitionSpatialTiles``'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tvm import relax

from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.ir.split_dims import ELEMENTWISE, Window, shape_of
from tvm_hetero.plan.spatial_plan import SPATIAL_SCHEMES

Box = tuple[tuple[int, int], ...]
"""``[lo, hi)`` per axis."""

SCHEMES = SPATIAL_SCHEMES
"""Partition schemes, FlexPie's four and the whole layer on the home device."""

POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")
NORMS = ("relax.nn.softmax", "relax.nn.log_softmax", "relax.nn.layer_norm")
LAYOUT = ("relax.permute_dims", "relax.reshape")
RANK_AXES: dict[int, dict[str, int | None]] = {
    4: {"InH": 2, "InW": 3, "OutC": 1, "Grid": None},  # NCHW; Grid: rows and columns
    3: {"InH": 1, "OutC": 2},  # (batch, tokens, features)
    2: {"OutC": 1},  # (batch, features)
}
"""The axis each scheme cuts, by the rank of a layer's output."""


def full_box(shape: Sequence[int]) -> Box:
    """The whole of a tensor of ``shape``."""
    return tuple((0, int(s)) for s in shape)


def box_shape(box: Box) -> tuple[int, ...]:
    """The shape of the tensor a box holds (the inverse of :func:`full_box`)."""
    return tuple(hi - lo for lo, hi in box)


def even_parts(extent: int, parts: int) -> list[tuple[int, int]]:
    """``extent`` units in ``parts`` consecutive ranges as equal as can be (the first ones one
    unit longer); empty ranges are left out when ``parts > extent``."""
    base, extra = divmod(extent, parts)
    out, lo = [], 0
    for k in range(parts):
        hi = lo + base + (1 if k < extra else 0)
        if hi > lo:
            out.append((lo, hi))
        lo = hi
    return out


def scheme_cells(scheme: str, shape: Sequence[int], devices: int) -> list[tuple[int, Box]]:
    """``(device, box)`` of each tile of an output of ``shape`` cut by ``scheme`` over
    ``devices`` devices (device 0 is home). A device may have several tiles (``Grid`` with an
    odd count) or none (fewer rows than devices).

    A transformer's ``(batch, tokens, features)`` takes ``InH`` (tokens) and ``OutC``
    (features), a ``(batch, features)`` output ``OutC``.

    Raises
    ------
    ValueError
        For an unknown scheme, or a scheme the output's rank does not have.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; known: {list(SCHEMES)}")
    full = full_box(shape)
    if scheme == "Home" or devices == 1:
        return [(0, full)]
    axes = RANK_AXES.get(len(shape), {})
    if scheme not in axes:
        raise ValueError(
            f"scheme {scheme!r} does not cut a rank-{len(shape)} output ({list(shape)}); "
            f"it takes {sorted(axes) or 'Home only'}"
        )
    axis = axes[scheme]
    if axis is not None:
        return [
            (d, _with(full, axis, part)) for d, part in enumerate(even_parts(shape[axis], devices))
        ]
    columns = math.ceil(devices / 2)
    cells = []
    for c, cols in enumerate(even_parts(shape[3], columns)):
        for r, rows in enumerate(even_parts(shape[2], 2)):
            snake = 2 * c + (r if c % 2 == 0 else 1 - r)
            cells.append((min(snake, devices - 1), _with(_with(full, 2, rows), 3, cols)))
    return cells


def _with(box: Box, axis: int, part: tuple[int, int]) -> Box:
    return (*box[:axis], part, *box[axis + 1 :])


def intersect(a: Box, b: Box) -> Box | None:
    """The common part of two boxes, ``None`` when empty."""
    out = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))
    return out if all(lo < hi for lo, hi in out) else None


def contiguous_runs(piece: Box, whole: Box) -> int:
    """The contiguous runs of memory ``piece`` forms in a row-major tensor holding ``whole``:
    copying it into place takes one copy per run (a join's work beyond its bytes).

    Examples
    --------
    >>> contiguous_runs(((0, 1), (0, 8), (0, 3), (0, 5)), ((0, 1), (0, 8), (0, 6), (0, 5)))
    8
    """
    sizes = box_shape(piece)
    axis = len(sizes)
    while axis > 0 and piece[axis - 1] == whole[axis - 1]:
        axis -= 1
    return math.prod(sizes[: max(axis - 1, 0)])


def join_layout(pieces: Sequence[Box], whole: Box) -> dict[str, int]:
    """How joining ``pieces`` into ``whole`` walks memory (the rearrange estimator's layout
    features): ``runs``, the contiguous runs copied (:func:`contiguous_runs` of each piece);
    ``inner``, the whole's innermost extent (the copy loop's vector); ``axis``, the innermost
    axis the pieces cut, counted from the last (0: columns of an image); ``span``, the
    elements of one step along that axis (1 for columns, a row's width for rows).

    Examples
    --------
    >>> whole = ((0, 1), (0, 8), (0, 6), (0, 5))
    >>> join_layout([((0, 1), (0, 8), (0, 3), (0, 5)), ((0, 1), (0, 8), (3, 6), (0, 5))], whole)
    {'runs': 16, 'inner': 5, 'axis': 1, 'span': 5}
    """
    sizes = box_shape(whole)
    cut = [i for i in range(len(whole)) if any(p[i] != whole[i] for p in pieces)]
    axis = max(cut, default=0)
    return {"runs": sum(contiguous_runs(p, whole) for p in pieces),
            "inner": sizes[-1] if sizes else 1, "axis": len(sizes) - 1 - axis if sizes else 0,
            "span": math.prod(sizes[axis + 1 :])}  # fmt: skip


def hull(a: Box | None, b: Box) -> Box:
    """The smallest box holding both (``a`` may be ``None``)."""
    if a is None:
        return b
    return tuple((min(x0, y0), max(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))


def needs(call: relax.Call, out: Box) -> list[Box | None] | None:
    """Per argument, the box of it that output box ``out`` of ``call`` reads (``None`` for an
    argument that is not a tensor); ``None`` when no rule covers this operator and box.

    The padding a windowed box needs at the tensor's border is :func:`window_padding`'s.
    """
    name = getattr(call.op, "name", "")
    shapes = [shape_of(a) for a in call.args]
    if name == "relax.nn.conv2d":
        return _conv2d_needs(call, out, shapes)
    if name in POOLS:
        a = call.attrs
        if bool(a.ceil_mode) or str(a.layout) != "NCHW" or str(a.out_layout) != "NCHW":
            return None
        (x,) = shapes
        rows, cols = (_axis_window(a.pool_size, a.strides, a.dilation, a.padding, x, i)
                      for i in (0, 1))  # fmt: skip
        return [(out[0], out[1], rows.input_rows(*out[2])[:2], cols.input_rows(*out[3])[:2])]
    if name in ELEMENTWISE:
        return [_broadcast_box(s, out) for s in shapes]
    if name == "relax.matmul":
        return _matmul_needs(shapes, out)
    if name == "relax.nn.batch_norm":  # item 0 (inference): per channel of ``axis``
        if len(out) != len(shapes[0] or ()):
            return None  # a box of the whole (out, mean, var) tuple: no rule
        channel = out[int(call.attrs.axis) % len(out)]
        return [out, *((channel,) for _ in shapes[1:])]
    if name == "relax.permute_dims":
        rank = len(out)
        perm = (
            list(range(rank))[::-1]
            if call.attrs.axes is None
            else [int(v) for v in call.attrs.axes]
        )
        box = [None] * rank
        for a, p in enumerate(perm):
            box[p] = out[a]
        return [tuple(box)]
    if name == "relax.reshape":
        return _reshape_needs(shapes[0], shape_of(call), out, len(call.args))
    if name in NORMS:
        rank = len(out)
        axes = (
            [int(call.attrs.axis) % rank] if name != "relax.nn.layer_norm"
            else [int(v) % rank for v in call.attrs.axes]
        )  # fmt: skip
        whole = shape_of(call) or []
        if any(out[a] != (0, whole[a]) for a in axes):
            return None  # a normalised axis must be whole
        return [out] + [None if sh is None else full_box(sh) for sh in shapes[1:]]
    if all(lo == 0 and hi == n for (lo, hi), n in zip(out, shape_of(call) or [], strict=True)):
        return [None if s is None else full_box(s) for s in shapes]  # the whole: any operator
    return None


def segment_members(
    func: relax.Function, bindings: Sequence[relax.VarBinding], group: Mapping[str, int], owner: str
) -> tuple[set[relax.Var], list[list[relax.VarBinding]]]:
    """The weights of ``func`` (operators computed from constants alone: they stay whole) and
    the other bindings of each group (``group``: operator id -> index); a binding that is not an
    operator (a tuple item) goes with the operator before it.

    Raises
    ------
    ValueError
        Naming ``owner``, for an operator in no group or a group id the function lacks.
    """
    ids = {b.var: b.node_id for b in op_bindings(func)}
    unknown = sorted(set(group) - set(ids.values()))
    if unknown:
        raise ValueError(f"{owner}: unknown operator id(s) {unknown[:5]}")
    weights: set[relax.Var] = set()
    members: list[list[relax.VarBinding]] = [[] for _ in range(max(group.values(), default=-1) + 1)]
    last = 0
    for b in bindings:
        node = ids.get(b.var)
        if node is not None and all(v in weights for v in relax.analysis.free_vars(b.value)):
            weights.add(b.var)
            continue
        if node is not None and node not in group:
            raise ValueError(f"{owner}: operator {node!r} is in no segment")
        last = group[node] if node is not None else last
        members[last].append(b)
    return weights, members


def segment_needs(
    members: Sequence[relax.VarBinding], weights: set, out: relax.Var, box: Box
) -> dict[relax.Var, Box]:
    """The box of every tensor a tile of ``out`` at ``box`` needs, through the bindings of a
    segment (the hull over a tensor's readers): the segment's own tensors, and the part of each
    outside tensor it reads. ``weights`` (computed from constants alone) are not followed.

    Raises
    ------
    ValueError
        Naming the first binding with no tile rule for the box asked of it.
    """
    need: dict[relax.Var, Box] = {out: box}
    bound = {b.var: b.value for b in members}
    for b in reversed(members):
        if b.var not in need:
            continue
        part = split_part(b.value, bound, need[b.var])
        if part is not None:  # a part of a split: that part of the split's input
            source, box_in_source = part
            if source not in weights:
                need[source] = hull(need.get(source), box_in_source)
            continue
        call = tile_op(b.value, bound)
        boxes = needs(call, need[b.var]) if call is not None else None
        if boxes is None:
            what = b.value.op.name if isinstance(b.value, relax.Call) else type(b.value).__name__
            raise ValueError(f"{b.var.name!r} ({what}) has no tile rule")
        for arg, arg_box in zip(call.args, boxes, strict=True):
            if isinstance(arg, relax.Var) and arg not in weights and arg_box is not None:
                need[arg] = hull(need.get(arg), arg_box)
    return need


TUPLE_OPS = ("relax.nn.batch_norm",)
"""Operators whose result is a tuple and whose item 0 has a tile rule."""


def tile_op(value: relax.Expr, bound: Mapping) -> relax.Call | None:
    """The call a binding's tile computes: the binding's own call, or for item 0 of a
    :data:`TUPLE_OPS` call (bound in ``bound``) that call; ``None`` otherwise."""
    if isinstance(value, relax.Call):
        return value
    if isinstance(value, relax.TupleGetItem) and int(value.index) == 0:
        call = bound.get(value.tuple_value)
        if isinstance(call, relax.Call) and getattr(call.op, "name", "") in TUPLE_OPS:
            return call
    return None


def split_part(value: relax.Expr, bound: Mapping, box: Box) -> tuple[relax.Expr, Box] | None:
    """For ``split(x, ...)[i]`` (the split bound in ``bound``): ``x`` and the box of ``x``
    that box ``box`` of part ``i`` is; ``None`` for anything else."""
    if not isinstance(value, relax.TupleGetItem):
        return None
    split = bound.get(value.tuple_value)
    if not isinstance(split, relax.Call) or getattr(split.op, "name", "") != "relax.split":
        return None
    shape = shape_of(split.args[0])
    if shape is None:
        return None
    axis = int(split.attrs.axis) % len(shape)
    sections = split.attrs.indices_or_sections
    try:
        count = int(sections)  # n equal sections
        starts = [k * (shape[axis] // count) for k in range(count)]
    except TypeError:  # split indices
        starts = [0, *(int(v) for v in sections)]
    offset = starts[int(value.index)]
    return split.args[0], _with(box, axis, (box[axis][0] + offset, box[axis][1] + offset))


def window_padding(call: relax.Call, out: Box) -> list[int]:
    """The ``[top, left, bottom, right]`` padding a windowed operator (convolution, pooling)
    needs to compute output box ``out`` from the input box :func:`needs` gives."""
    a = call.attrs
    x = shape_of(call.args[0])
    size = (
        [int(v) for v in shape_of(call.args[1])[2:]]
        if call.op.name == "relax.nn.conv2d" else [int(v) for v in a.pool_size]
    )  # fmt: skip
    (top, bottom), (left, right) = (
        _axis_window(size, a.strides, a.dilation, a.padding, x, i).input_rows(*out[2 + i])[2:]
        for i in (0, 1)
    )
    return [top, left, bottom, right]


def _axis_window(size, strides, dilation, padding, x: list[int], i: int) -> Window:
    return Window(
        int(strides[i]), (int(size[i]) - 1) * int(dilation[i]) + 1, int(padding[i]), x[2 + i]
    )


def _conv2d_needs(call: relax.Call, out: Box, shapes: list) -> list[Box | None] | None:
    a = call.attrs
    if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NCHW", "OIHW", "NCHW"):
        return None
    x, w = shapes
    groups, channels = int(a.groups), out[1]
    whole_channels = channels == (0, w[0])
    depthwise = groups == x[1] == w[0] and w[1] == 1
    if groups != 1 and not depthwise and not whole_channels:
        return None
    rows, cols = (_axis_window(w[2:], a.strides, a.dilation, a.padding, x, i) for i in (0, 1))
    in_channels = channels if depthwise else (0, x[1])
    data = (out[0], in_channels, rows.input_rows(*out[2])[:2], cols.input_rows(*out[3])[:2])
    return [data, (channels, *full_box(w[1:]))]


def _matmul_needs(shapes: list, out: Box) -> list[Box | None] | None:
    """A matmul's output rows and columns read rows of ``x`` and columns of ``w`` (all of the
    reduced axis); batch axes broadcast."""
    x, w = shapes
    if x is None or w is None or len(x) < 2 or len(w) < 2:
        return None

    def operand(shape: list[int], rows: tuple[int, int], cols: tuple[int, int]) -> Box:
        batch = _broadcast_box(shape[:-2], out[:-2]) if len(shape) > 2 else ()
        return (*batch, rows, cols)

    return [operand(x, out[-2], (0, x[-1])), operand(w, (0, w[-2]), out[-1])]


def _reshape_needs(x: list[int] | None, y: list[int] | None, out: Box, nargs: int):
    """A reshape keeps the leading axes both shapes share; a box whole beyond them reads the
    same leading ranges and all the rest."""
    if x is None or y is None:
        return None
    lead = 0
    while lead < min(len(x), len(y)) and x[lead] == y[lead]:
        lead += 1
    if any(out[a] != (0, y[a]) for a in range(lead, len(y))):
        return None
    return [(*out[:lead], *full_box(x[lead:])), *([None] * (nargs - 1))]


def _broadcast_box(shape: list[int] | None, out: Box) -> Box | None:
    """The part of a broadcast operand of ``shape`` an element-wise output box reads."""
    if shape is None:
        return None
    lead = len(out) - len(shape)
    return tuple(
        (0, 1) if n == 1 and out[lead + i] != (0, 1) else out[lead + i] for i, n in enumerate(shape)
    )


def tile_call(call: relax.Call, args: list[relax.Expr], out: Box) -> relax.Expr:
    """``call`` on tile arguments computing output box ``out``: windows get the padding the
    tile needs, a depthwise convolution as many groups as its channels."""
    name = call.op.name
    if name == "relax.reshape":
        return relax.op.reshape(args[0], list(box_shape(out)))
    if name == "relax.nn.conv2d":
        a = call.attrs
        groups = int(a.groups)
        if groups > 1 and groups == shape_of(call.args[0])[1]:  # depthwise: channels cut
            groups = out[1][1] - out[1][0]
        return relax.op.nn.conv2d(
            args[0], args[1], a.strides, window_padding(call, out), a.dilation, groups,
            a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype,
        )  # fmt: skip
    if name in POOLS:
        a = call.attrs
        pool = relax.op.nn.max_pool2d if name.endswith("max_pool2d") else relax.op.nn.avg_pool2d
        return pool(
            args[0], a.pool_size, a.strides, window_padding(call, out), a.dilation,
            bool(a.ceil_mode), bool(a.count_include_pad), str(a.layout), str(a.out_layout),
        )  # fmt: skip
    return relax.Call(call.op, args, call.attrs, call.ty_args)
