"""FoldConstantWeights: convolution weights computed from constants, evaluated at load."""

from __future__ import annotations

import logging

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import TupleType
from tvm_hetero.ir.bindings import calls_one_of, calls_op, iter_bindings
from tvm_hetero.ir.types import static_shape
from tvm_hetero.passes.fold_constant_kernels import FoldConstantKernels

log = logging.getLogger(__name__)

CONVOLUTIONS = frozenset(
    {"relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", "relax.nn.conv1d_transpose",
     "relax.nn.conv2d_transpose"}
)  # fmt: skip
"""Operators whose second operand is a weight this pass folds."""

BATCH_NORM = "relax.nn.batch_norm"

LEAVES = (Constant, relax.ShapeExpr, tvm.ir.StringImm)
"""Operands that are constants themselves (a value of TIR type is a ``Constant`` too)."""
FOLD_ROUNDS = 2
"""Rounds of folding (``FoldConstantKernels``: the round's kernels in one build): an item of a
tuple of folded values (a batch norm's output) stays bound to the item's expression until
``CanonicalizeBindings`` takes the constant out of the tuple, for the next round to fold what
reads it. TVM's ``FoldConstant`` (a build a kernel) runs once after the rounds, for what
they could not fold."""


@tvm.transform.module_pass(opt_level=0, name="FoldConstantWeights")
class FoldConstantWeights:
    """Replace each convolution weight that a function computes from constants alone by its
    value.

    Some networks compute their convolutions' weights in the forward pass from the stored
    ones: timm's NF-ResNets standardise each filter (``ScaledStdConv2d``: a batch norm of the
    weights, exported as ``ReduceMean``, ``Sub``, ``Mul`` and ``BatchNormalization`` of the
    initializer), wav2vec2-style audio encoders normalise their positional convolution's
    weights (``weight_norm``). Such a weight is a chain of operators on constants, so the
    passes that need a convolution's weights as a constant (``WinogradConvolutions``,
    ``PackConstantWeights``' packed layouts, ``CropConvolutionTaps``) passed it by, and the
    weights were computed only after legalization, by ``FoldConstantKernels``: NF-ResNet-26's
    3x3 convolutions ran unpacked, without Winograd (ONNX Runtime folds them when its session
    is created). Here the operators that compute each such weight are copied into a function
    of their own, legalized, folded (``FoldConstantKernels``, then TVM's ``FoldConstant``) and
    the weight is bound to the result. NF-ResNet-26 then ran at 1.10x ONNX Runtime's time and
    NFNet-L0 at 1.09x, against 1.26x and 1.21x without it in the same rounds (Intel Xeon, two
    threads; ``benchmarks/models/before_and_now.py``).

    Notes
    -----
    Only weights of static shape computed in a function's top binding blocks, from constants
    and pure operators alone. Where the copy does not legalize or fold to constants, the
    module is left as it was (logged at debug level). Applied at load
    (:func:`~tvm_hetero.frontends.load.from_irmodule`), so every strategy sees the constants.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with every convolution weight computed from constants folded
        (``mod`` itself where there is none)."""
        out = None
        for gv, func in mod.functions_items():
            values = _folded_weights(func) if isinstance(func, relax.Function) else {}
            if values:
                out = mod.clone() if out is None else out
                folded = _Substitute(out, values).visit_expr(func)
                out[gv] = relax.analysis.remove_all_unused(folded)
        return mod if out is None else out


def _folded_weights(func: relax.Function) -> dict[relax.Var, Constant]:
    """Each convolution weight of ``func`` computed from constants, with its value."""
    computed: dict[relax.Var, relax.Binding] = {}  # variables computed from constants alone
    wanted: list[relax.Var] = []
    for _, _, binding in iter_bindings(func):
        value = getattr(binding, "value", None)
        if _from_constants(value, computed):
            computed[binding.var] = binding
        elif calls_one_of(value, CONVOLUTIONS):
            weight = value.args[1]
            if weight in computed and weight not in wanted and _static(weight):
                wanted.append(weight)
    if not wanted:
        return {}
    needed = _needed(wanted, computed)
    order = [b for b in computed.values() if b.var in needed]
    try:
        return _evaluate(order, wanted)
    except Exception as err:  # whatever legalizing or folding raised: leave them as they are
        log.debug("FoldConstantWeights: left %d weight(s) unfolded: %s", len(wanted), err)
        return {}


def _static(var: relax.Var) -> bool:
    return isinstance(var.ty, relax.TensorType) and static_shape(var.ty) is not None


def _from_constants(value: relax.Expr | None, computed: dict) -> bool:
    """Whether ``value`` is a pure operator's call, a tuple or a tuple's item whose operands
    are constants or variables in ``computed``."""

    def known(arg: relax.Expr) -> bool:
        if isinstance(arg, relax.Tuple):
            return all(known(f) for f in arg.fields)
        return isinstance(arg, LEAVES) or arg in computed

    if isinstance(value, relax.TupleGetItem):
        return value.tuple_value in computed
    if isinstance(value, relax.Tuple):
        return bool(value.fields) and known(value)
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)):
        return False
    if not value.op.name.startswith("relax.") or not value.op.get_attr("FPurity"):
        return False
    return all(known(a) for a in value.args)


def _needed(wanted: list[relax.Var], computed: dict) -> set[relax.Var]:
    """The variables of ``computed`` the ``wanted`` ones are computed from, themselves too."""
    needed: set[relax.Var] = set()
    stack = list(wanted)
    while stack:
        var = stack.pop()
        if var in needed:
            continue
        needed.add(var)
        stack.extend(v for v in relax.analysis.free_vars(computed[var].value) if v in computed)
    return needed


def _evaluate(order: list[relax.Binding], wanted: list[relax.Var]) -> dict[relax.Var, Constant]:
    """The ``wanted`` values: ``order``'s bindings in a function of their own, legalized and
    folded; those that did not fold to constants are left out."""
    result = relax.Var("folded", TupleType([v.ty for v in wanted]))
    block = relax.DataflowBlock([*order, relax.VarBinding(result, relax.Tuple(wanted))])
    fold = relax.Function([], relax.SeqExpr([block], result), result.ty)
    small = IRModule({"main": fold.with_attr("global_symbol", "main")})
    small = relax.transform.LegalizeOps()(_batch_norms_decomposed(small))
    for _ in range(FOLD_ROUNDS):
        small = relax.transform.CanonicalizeBindings()(FoldConstantKernels()(small))
    small = relax.transform.FoldConstant()(small)  # what one build could not fold
    bound = {b.var: b.value for _, _, b in iter_bindings(small["main"])}
    body = small["main"].body.body
    fields = bound.get(body, body)
    fields = fields.fields if isinstance(fields, relax.Tuple) else []
    values = {}
    for var, field in zip(wanted, fields, strict=False):
        field = bound.get(field, field)
        if isinstance(field, Constant):
            values[var] = field
    return values


def _batch_norms_decomposed(mod: IRModule) -> IRModule:
    """``mod`` with its batch norms as the operators they are made of, where all of them are
    in training mode or all in inference mode (TVM's decompositions take every batch norm as
    one or the other, whatever its ``training``); else as it is. A batch norm legalizes to a
    kernel of three outputs, which ``FoldConstantKernels`` does not fold and TVM's
    ``FoldConstant`` builds alone: NFNet-L0's load took 7.3 s, 2.6 of them in 55 such builds,
    and takes 4.0 decomposed."""
    modes = {
        bool(b.value.attrs.training)
        for _, _, b in iter_bindings(mod["main"])
        if calls_op(b.value, BATCH_NORM)
    }
    if modes == {True}:
        return relax.transform.DecomposeOpsForTraining()(mod)
    if modes == {False}:
        return relax.transform.DecomposeOpsForInference()(mod)
    return mod


@mutator
class _Substitute(PyExprMutator):
    """Each folded variable replaced by its constant wherever it is read."""

    def __init__(self, mod: IRModule, values: dict[relax.Var, Constant]) -> None:
        super().__init__(mod)
        self.values = values

    def visit_var_(self, op: relax.Var) -> relax.Expr:
        return self.values[op] if op in self.values else super().visit_var_(op)

    def visit_dataflow_var_(self, op: relax.DataflowVar) -> relax.Expr:
        return self.values[op] if op in self.values else super().visit_dataflow_var_(op)
