"""WinogradConvolutions: CPU 3x3 convolutions of stride 1 as Winograd's F(4 x 4, 3 x 3) or
F(2 x 2, 3 x 3)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache, partial

import numpy as np
import tvm
from tvm import relax, te, tirx
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator
from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

from tvm_hetero._compat import PrimFunc, TensorType
from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OPAQUE, WINOGRAD_ATTR
from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes, cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_lanes

CONV2D_OP = "relax.nn.conv2d"
TILES = (4, 2)
"""Output positions a tile may have along each axis (``m`` of ``F(m x m, 3 x 3)``), the first
preferred: ``F(4, 3)`` spends 36 products on a tile of 16 outputs where the convolution spends
144; ``F(2, 3)`` 16 on 4. ``F(6, 3)`` ran a few percent faster than ``F(4, 3)`` with five times
its rounding error."""
MIN_TILES = 32
"""Fewest tiles (over the batch) a tile size needs. Each transformed weight (36 a channel pair
for ``F(4, 3)``, 4x the convolution's 9) is used once a tile: over a 14 x 14 map (16 tiles of
4 x 4) ResNet-18's 256-channel products read 9.4 MB of weights for 16 rows each and ran slower
than the convolution, where ``F(2, 3)`` (49 tiles, 16 weights a pair) ran faster; over a 7 x 7
map neither did (``benchmarks/cpu_kernels/winograd.py``)."""


@tvm.transform.module_pass(opt_level=0, name="WinogradConvolutions")
class WinogradConvolutions:
    """Compute each CPU 3x3 convolution of stride 1 over a map of at least
    :data:`MIN_TILES` tiles as Winograd's minimal filtering ``F(m x m, 3 x 3)``, ``m`` 4 or
    2 (:data:`TILES`, :func:`tile_size`).

    ``conv2d(x, w)`` (NCHW, one group, no dilation, constant ``w (O, C, 3, 3)``, input and
    output channels that whole vectors of the target hold with at most a third more, the rest
    zeros: 24 in 32, not 3 in 16) becomes four kernels and a product (``s = m + 2``):

    1. ``winograd_nhwc``: ``x`` padded to whole tiles, channels innermost ``(N, H'', W'', C)``;
    2. ``winograd_input`` (:data:`~tvm_hetero.ir.attrs.WINOGRAD_ATTR` ``input``): each
       ``s x s`` window ``d`` of the padded image (tiles ``m`` apart) as ``B^T d B``, written
       ``V (s^2, tiles, C)``;
    3. ``matmul(V, U)``: ``s^2`` products ``(tiles, C) @ (C, O)``, ``U = G w G^T`` transformed
       once at compile time (``(s^2, C, O)``, a constant: the matmul rule's);
    4. ``winograd_output`` (``output``): each tile's ``A^T m A``, ``(tiles, m, m, O)``;
    5. ``winograd_nchw``: the tiles back in NCHW, cropped to the output (what follows, a bias,
       a residual sum and an activation, fuses into it).

    The transforms' sums hold only their nonzero terms (``A``, ``B``, ``G`` are TOPI's
    Cook-Toom matrices; points ``0, -1, 1, 1/2, -2`` for ``F(4, 3)``): the ``winograd`` CPU
    rule unrolls the window's positions and vectorizes the channels. Products per output and
    input channel fall from 9 to 2.25 (``F(4, 3)``) or 4 (``F(2, 3)``): ResNet's, VGG's,
    DenseNet's and GoogLeNet's 3x3 layers over 56 x 56 to 14 x 14 maps ran 1.5-2.4x faster
    than the convolution rule's kernel, 0.44-0.69x ONNX Runtime's time where they had 32
    channels or more (``benchmarks/cpu_kernels/winograd.py``; AMD EPYC Zen 4, 2 threads); the
    numbers differ by rounding, about ``1e-6`` of the output's scale.

    Parameters
    ----------
    tiles : mapping of str to int, optional
        The tile size of each convolution by its :func:`workload_key`, measured on the target
        (``build.conv_choices``): 4, 2, or 0 to leave it to the convolution rule. A convolution
        the mapping does not name takes :func:`tile_size`'s static choice.

    Notes
    -----
    Run after ``RealizeVDevice`` and before ``PadConvolutionOutputs`` and ``LegalizeOps``.
    Strided, dilated, grouped, GPU and symbolic convolutions, weights that are no constant
    and channels that would be padded by more than a third are left alone (the convolution
    rule takes them: a 3-channel stem over 224 x 224 would multiply 16 channels, five times
    its own).
    """

    def __init__(self, tiles: Mapping[str, int] | None = None) -> None:
        bad = {k: v for k, v in (tiles or {}).items() if v not in (0, *TILES)}
        if bad:
            raise ValueError(f"WinogradConvolutions: tiles must be 0 or one of {TILES}: {bad}")
        self.tiles = dict(tiles or {})

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, partial(_as_winograd, tiles=self.tiles))


def workload_key(call: relax.Call, target: str) -> str:
    """What a measured tile size is kept under: the target, the input's and the weight's
    shapes and the padding (``1x64x56x56 * 64x64x3x3 pad 1,1,1,1 | llvm -mcpu=...``)."""
    dims = ["x".join(str(int(v)) for v in a.ty.shape.values) for a in call.args[:2]]
    pads = ",".join(str(int(v)) for v in call.attrs.padding)
    return f"{dims[0]} * {dims[1]} pad {pads} | {target}"


def candidates(mod: IRModule) -> dict[str, relax.Call]:
    """Each convolution this pass could compute as Winograd's (whatever the size of its map),
    one a :func:`workload_key`: what a build measures to choose :class:`WinogradConvolutions`'
    ``tiles``."""
    found: dict[str, relax.Call] = {}

    def collect(rewriter: PyExprMutator, call: relax.Call) -> None:
        if eligible(rewriter, call):
            target = str(cpu_tensor_target(call.ty, rewriter.mod_))
            found.setdefault(workload_key(call, target), call)

    rewrite_calls(mod, collect)
    return found


def rewritten(rewriter: PyExprMutator, call: relax.Call, tiles: Mapping[str, int]) -> int:
    """The tile size this pass computes ``call`` with: 0 when it leaves it alone."""
    if not eligible(rewriter, call):
        return 0
    key = workload_key(call, str(cpu_tensor_target(call.ty, rewriter.mod_)))
    if key in tiles:
        return tiles[key]
    n, _, h, w = (int(v) for v in call.ty.shape.values)
    return tile_size(n, h, w)


def eligible(rewriter: PyExprMutator, call: relax.Call) -> bool:
    """Whether ``call`` is a convolution this pass can rewrite, whatever its map."""
    layouts = ("NCHW", "OIHW", "NCHW")
    if not cpu_op_with_static_shapes(call, CONV2D_OP, layouts, rewriter.mod_):
        return False
    a = call.attrs
    if int(a.groups) != 1 or call.ty.dtype != "float32":
        return False
    if a.out_dtype and str(a.out_dtype) not in ("void", "float32"):
        return False
    if any(int(v) != 1 for v in (*a.strides, *a.dilation)):
        return False
    if not isinstance(bound_value(rewriter, call.args[1]), Constant):
        return False
    o, c, kh, kw = (int(v) for v in call.args[1].ty.shape.values)
    lanes = vector_lanes(cpu_tensor_target(call.ty, rewriter.mod_), 32)
    fits = all(3 * _in_vectors(k, lanes) <= 4 * k for k in (c, o))
    return (kh, kw) == (3, 3) and fits


def _in_vectors(channels: int, lanes: int) -> int:
    """``channels`` rounded up to whole vectors of ``lanes``."""
    return -(-channels // lanes) * lanes


def tile_size(batch: int, height: int, width: int) -> int:
    """The first of :data:`TILES` that cuts ``batch`` outputs of ``height x width`` into at
    least :data:`MIN_TILES` tiles; 0 when none does."""
    for m in TILES:
        if batch * -(-height // m) * -(-width // m) >= MIN_TILES:
            return m
    return 0


@cache
def matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``A (tile + 2, tile)``, ``B (tile + 2, tile + 2)``, ``G (tile + 2, 3)`` of
    ``F(tile, 3)``: ``y = A^T [(G g) * (B^T d)]``."""
    a, b, g = _cook_toom_convolution(_interpolation_points(tile + 2), tile, 3)
    return np.asarray(a), np.asarray(b), np.asarray(g)


def transformed_weights(w: np.ndarray, tile: int) -> np.ndarray:
    """``U ((tile + 2)^2, C, O)`` of weights ``w (O, C, 3, 3)``: ``G w G^T`` at each position
    of a tile's window, summed in float64."""
    _, _, g = matrices(tile)
    o, c = w.shape[:2]
    u = np.einsum("ik,ockl,jl->ijco", g, w.astype(np.float64), g)
    return u.reshape((tile + 2) ** 2, c, o).astype(w.dtype)


def _as_winograd(
    rewriter: PyExprMutator, call: relax.Call, tiles: Mapping[str, int]
) -> relax.Expr | None:
    size = rewritten(rewriter, call, tiles)
    if not size:
        return None
    bb, x = rewriter.builder_, call.args[0]
    w = bound_value(rewriter, call.args[1]).value.numpy()
    lanes = vector_lanes(cpu_tensor_target(call.ty, rewriter.mod_), 32)
    n = int(x.ty.shape.values[0])
    _, o, oh, ow = (int(v) for v in call.ty.shape.values)
    c_wide, o_wide = _in_vectors(w.shape[1], lanes), _in_vectors(o, lanes)
    th, tw = -(-oh // size), -(-ow // size)
    top, left = int(call.attrs.padding[0]), int(call.attrs.padding[1])
    a, b, _ = matrices(size)
    vdev, side = call.ty.vdevice, size + 2
    tiles = n * th * tw

    def kernel(func: PrimFunc, kind: str, args: list, shape: tuple) -> relax.Var:
        func = func.without_attr("global_symbol").with_attrs(
            {WINOGRAD_ATTR: kind, OP_PATTERN_ATTR: OPAQUE}
        )
        gv = bb.add_func(func, f"winograd_{kind}")
        return bb.emit(relax.call_tir(gv, args, TensorType(shape, "float32", vdev)))

    padded = bb.emit(bb.call_te(
        _channels_last, x, (th * size + 2, tw * size + 2, c_wide), (top, left),
        primfunc_name_hint="winograd_nhwc",
    ))  # fmt: skip
    v = kernel(
        _input_kernel(padded.ty.shape, th, tw, b), "input", [padded], (side**2, tiles, c_wide)
    )
    u = np.zeros((side * side, c_wide, o_wide), w.dtype)  # channels past the model's: zeros
    u[:, : w.shape[1], :o] = transformed_weights(w, size)
    m = bb.emit(relax.op.matmul(v, relax.const(u)))
    z = kernel(_output_kernel(tiles, o_wide, a), "output", [m], (tiles, size, size, o_wide))
    return bb.call_te(_in_nchw, z, (n, o, oh, ow), (th, tw), primfunc_name_hint="winograd_nchw")


def _channels_last(x: te.Tensor, size: tuple[int, int, int], pad: tuple[int, int]) -> te.Tensor:
    """``x (N, C, H, W)`` padded (``pad`` rows and columns before, to ``size`` rows, columns and
    channels in all) as ``(N, H'', W'', C'')``."""
    n, c, h, w = (int(v) for v in x.shape)
    top, left = pad
    zero = tirx.const(0.0, x.dtype)

    def value(i, y, z, ch):
        inside = tirx.all(y >= top, y < top + h, z >= left, z < left + w, ch < c)
        return tirx.if_then_else(inside, x[i, ch, y - top, z - left], zero)

    return te.compute((n, *size), value, name="winograd_nhwc")


def _in_nchw(z: te.Tensor, shape: tuple, tiles: tuple[int, int]) -> te.Tensor:
    """The tiles ``z (N th tw, m, m, O)`` as ``shape`` ``(N, O, H', W')``."""
    th, tw = tiles
    m = int(z.shape[1])
    return te.compute(
        shape,
        lambda i, o, y, x: z[(i * th + y // m) * tw + x // m, y % m, x % m, o],
        name="winograd_nchw",
    )


def _pick(index: tirx.PrimExpr, values: list) -> tirx.PrimExpr:
    """``values[index]``: selects the unrolled schedule folds to one value."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == k, values[k], out)
    return out


def _combination(coefficients: np.ndarray, terms: list) -> tirx.PrimExpr:
    """``sum(c * t)`` over the nonzero coefficients (``t`` or ``-t`` for ``+-1``)."""
    out = None
    for c, t in zip(coefficients, terms, strict=True):
        if c == 0:
            continue
        term = t if c == 1 else -t if c == -1 else t * tirx.const(float(c), "float32")
        out = term if out is None else out + term
    return out if out is not None else tirx.const(0.0, "float32")


def _input_kernel(shape, th: int, tw: int, b: np.ndarray) -> PrimFunc:
    """``V[(i, j), p, c] = (B^T d_p B)[i, j]``, ``d_p`` tile ``p``'s ``(m + 2) x (m + 2)``
    window of channel ``c``: rows (block ``winograd_rows``, ``B^T d``) then columns."""
    n, _, _, c = (int(v) for v in shape)
    side = b.shape[0]
    m = side - 2
    x = te.placeholder((n, th * m + 2, tw * m + 2, c), "float32", name="x")

    def window(p):
        return p // (th * tw), (p % (th * tw)) // tw * m, p % tw * m

    def rows(i, j, p, ch):
        img, y, z = window(p)
        column = [x[img, y + k, z + j, ch] for k in range(side)]
        return _pick(i, [_combination(b[:, r], column) for r in range(side)])

    bt_d = te.compute((side, side, n * th * tw, c), rows, name="winograd_rows")

    def columns(e, p, ch):
        row = [bt_d[e // side, k, p, ch] for k in range(side)]
        return _pick(e % side, [_combination(b[:, r], row) for r in range(side)])

    out = te.compute((side * side, n * th * tw, c), columns, name="winograd_input")
    return te.create_prim_func([x, out])


def _output_kernel(tiles: int, o: int, a: np.ndarray) -> PrimFunc:
    """``Z[p, y, x, o] = (A^T m_p A)[y, x]``, ``m_p`` tile ``p``'s ``(m + 2) x (m + 2)``
    products of channel ``o``: columns (block ``winograd_columns``, ``A^T m``) then rows."""
    side, size = a.shape
    m = te.placeholder((side * side, tiles, o), "float32", name="m")

    def columns(y, j, p, ch):
        column = [m[k * side + j, p, ch] for k in range(side)]
        return _pick(y, [_combination(a[:, r], column) for r in range(size)])

    at_m = te.compute((size, side, tiles, o), columns, name="winograd_columns")

    def rows(p, y, x, ch):
        row = [at_m[y, k, p, ch] for k in range(side)]
        return _pick(x, [_combination(a[:, r], row) for r in range(size)])

    out = te.compute((tiles, size, size, o), rows, name="winograd_output")
    return te.create_prim_func([m, out])
