"""The stage-boundary marker: a hand-placed pipeline cut, as PiPPy's ``pipe_split`` and
mlc-llm's ``pipeline_stage_boundary``.

``x = stage_boundary(x)`` in a model says "a pipeline may be cut here, and only at such marks":
when a model has marks, EdgePipe's layers are the runs between them. The mark is an identity;
``StripStageBoundaries`` turns it into an alias before anything is built.
"""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_hetero.ir.attrs import STAGE_BOUNDARY


def stage_boundary(x: relax.Expr) -> relax.Expr:
    """A call that marks ``x`` as a place to cut the pipeline (emit it with a BlockBuilder, or
    write ``R.call_pure_packed("tvm_hetero.stage_boundary", x, ty_args=...)`` in TVMScript)."""
    return relax.op.call_pure_packed(STAGE_BOUNDARY, x, ty_args=x.ty)


def is_stage_boundary(value: relax.Expr) -> bool:
    """Whether ``value`` is a stage-boundary mark."""
    return (
        isinstance(value, relax.Call)
        and isinstance(value.op, tvm.ir.Op)
        and value.op.name == "relax.call_pure_packed"
        and isinstance(value.args[0], relax.ExternFunc)
        and value.args[0].global_symbol == STAGE_BOUNDARY
    )
