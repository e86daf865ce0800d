"""StackLoopBuffers: a CPU kernel's small buffers inside its loops on the stack, not the pool."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import tirx
from tvm.ir import IRModule

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.sblocks import buffer_bytes, with_children, with_prim_funcs

STACK_ANNOTATION = "disable_lower_builtin"
"""TVM's ``kDisableLowerTVMBuiltin``: ``LowerTVMBuiltin`` leaves an allocation so annotated as it
is, which LLVM's code generator makes a stack slot of the function that holds it."""
MAX_BUFFER_BYTES = 64 * 1024
"""The largest buffer put on the stack."""
MAX_KERNEL_BYTES = 256 * 1024
"""The most bytes of buffers a kernel's function puts on the stack, counted in the order they
appear (an unrolled loop's copies each count): TVM's pool threads and the caller's have
megabytes of stack."""
TVM_STACK_BYTES = 1024
"""``runtime::kMaxStackAlloca``: below it ``LowerTVMBuiltin`` keeps a CPU buffer on the stack."""
LOCAL_BUFFERS = True
"""Whether buffers in ``local`` scope (a schedule's register tile, ``cache_write``'s
accumulators) are put on the stack too, whatever their size: ``LowerTVMBuiltin`` keeps only
``global`` buffers under 1 KiB there and asks the pool for every ``local`` one, however small.
Off, only ``global`` buffers are (the switch its benchmark turns)."""
CPU_DEVICE_TYPE = 1
"""``kDLCPU``, the value of the ``device_type`` attribute ``MakePackedAPI`` sets on a kernel."""


@tvm.transform.module_pass(opt_level=0, name="StackLoopBuffers")
class StackLoopBuffers:
    """Give each CPU kernel's buffer that is allocated inside a loop, of a constant size from
    TVM's stack limit (1 KiB) up to :data:`MAX_BUFFER_BYTES`, a stack slot instead of the
    workspace pool.

    ``LowerTVMBuiltin`` keeps a CPU buffer under 1 KiB on the stack and asks the workspace pool
    for any other (``TVMBackendAllocWorkspace`` and ``TVMBackendFreeWorkspace``, with their
    checks), where the buffer is allocated: a buffer the schedule computes at a row of a
    parallel loop (a softmax row's ``exp``, a reduction's ``rfactor`` partial sums, a task's
    padded input) is asked for and freed again at every row. Whisper's softmax (6 x 1500 rows
    of 1,500) allocated its 6,000-byte ``exp`` row 9,000 times a call; SegFormer's (16,384
    rows of 256) its 1,024-byte partial maxima 16,384 times. A stack slot costs nothing at run
    time; each thread runs the loop body on its own stack, as the pool's buffers are each
    thread's too. Buffers outside every loop (once a call) stay in the pool, whatever their
    size, and so does every buffer of a kernel once :data:`MAX_KERNEL_BYTES` is reached.
    ``LowerTVMBuiltin`` asks the pool for every ``local`` buffer (a register tile, the
    accumulators of ``cache_write``), however small, so those go on the stack from one byte
    (:data:`LOCAL_BUFFERS`): a depthwise convolution's tasks each asked for 64 bytes of the
    last row LLVM kept in memory. A lowered buffer of vectors (``float32x16``) is counted by
    all its lanes: counted by one, the channel tile's padded input of 7,744 bytes passed for
    484, was left to ``LowerTVMBuiltin``, and went to the pool.
    Each kernel alone, pool -> stack, ONNX Runtime beside (AMD EPYC Zen 4, two threads,
    ``benchmarks/cpu_kernels/loop_buffers.py``): SegFormer's softmax 1.88 -> 1.58 ms (1.24),
    a 3x3 / 2 max pool over 112 x 112 0.080 -> 0.072, a strided depthwise convolution 0.221 ->
    0.210 (its task's padded input), Whisper's softmax level (4.13 -> 4.28, 4.37): LLVM's code
    generator aligns a stack buffer to 16 bytes, the pool to 64.

    Notes
    -----
    Runs on the lowered TIR of the build's host functions (after ``MakePackedAPI``, whose
    ``device_type`` attribute says where a kernel runs), just before ``LowerTVMBuiltin``:
    :func:`~tvm_hetero.build.multi_device.tir_pipeline` puts it there. Only buffers in
    ``global`` scope under ``device_type`` CPU are annotated; numbers are unchanged.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with its CPU kernels' loop buffers annotated (``mod`` if none is)."""
        return with_prim_funcs(mod, stacked)


def stacked(func: PrimFunc) -> PrimFunc:
    """``func`` with its CPU loop buffers annotated for the stack (``func`` if none is)."""
    budget = [MAX_KERNEL_BYTES]
    body = _walk(func.body, cpu=False, in_loop=False, budget=budget)
    return func if body.same_as(func.body) else func.with_body(body)


def on_cpu(stmt: tirx.Stmt, cpu: bool) -> bool:
    """Whether what ``stmt`` holds runs on a CPU, given whether ``stmt`` does: a
    ``device_type`` attribute says so for its body, anything else keeps ``cpu``."""
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "device_type":
        value = stmt.value
        return isinstance(value, tirx.IntImm) and int(value) == CPU_DEVICE_TYPE
    return cpu


def rewritten_cpu_loops(func: PrimFunc, rewrite: Callable) -> PrimFunc:
    """``func`` with each loop under ``device_type`` CPU for which ``rewrite(loop, outer)``
    (``outer``: the loops around it, outermost first) returns a statement replaced by that
    statement, the loops it returns ``None`` for walked into (``func`` itself where nothing
    is replaced): the walk of the TIR passes that rewrite a CPU kernel's loops."""
    body = _rewritten(func.body, False, (), rewrite)
    return func if body.same_as(func.body) else func.with_body(body)


def _rewritten(stmt: tirx.Stmt, cpu: bool, outer: tuple, rewrite: Callable) -> tirx.Stmt:
    cpu = on_cpu(stmt, cpu)
    if cpu and isinstance(stmt, tirx.For):
        found = rewrite(stmt, outer)
        if found is not None:
            return found
        outer = (*outer, stmt)
    return with_children(stmt, lambda child: _rewritten(child, cpu, outer, rewrite))


def _walk(stmt: tirx.Stmt, cpu: bool, in_loop: bool, budget: list[int]) -> tirx.Stmt:
    if isinstance(stmt, tirx.AllocBuffer):
        return _stacked_alloc(stmt, budget) if cpu and in_loop else stmt
    cpu = on_cpu(stmt, cpu)
    in_loop = in_loop or isinstance(stmt, tirx.For | tirx.While)
    return with_children(stmt, lambda child: _walk(child, cpu, in_loop, budget))


def _scopes() -> tuple[str, ...]:
    """The storage scopes whose loop buffers go on the stack (:data:`LOCAL_BUFFERS`)."""
    return ("global", "local") if LOCAL_BUFFERS else ("global",)


def _stacked_alloc(stmt: tirx.AllocBuffer, budget: list[int]) -> tirx.AllocBuffer:
    """``stmt`` annotated for the stack where its buffer qualifies and the budget allows."""
    scope = stmt.buffer.scope()
    if STACK_ANNOTATION in stmt.annotations or scope not in _scopes():
        return stmt
    size = buffer_bytes(stmt.buffer)
    least = TVM_STACK_BYTES if scope == "global" else 1
    if size is None or not least <= size <= min(MAX_BUFFER_BYTES, budget[0]):
        return stmt
    budget[0] -= size
    annotations = {**dict(stmt.annotations), STACK_ANNOTATION: tirx.IntImm("int32", 1)}
    return tirx.AllocBuffer(stmt.buffer, annotations)
