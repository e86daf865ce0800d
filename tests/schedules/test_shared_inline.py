"""Element-wise kernels inline a large expression into one reader only
(``common.SHARED_INLINE_MAX_NODES``): a block read by several keeps its buffer."""

from unittest.mock import patch

import numpy as np
import tvm
from conftest import fused_body
from tvm import relax
from tvm.script import tirx as T

from tvm_hetero._compat import make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu import common

CPU = make_target({**cpu_device().target, "num-cores": 2})


@T.prim_func(private=True, s_tir=True)
def shared(A: T.Buffer((T.int64(16),), "float32"), E: T.Buffer((T.int64(16),), "float32")):
    """``B = 2A + 1`` read by ``C = B + 1`` and ``D = 3B``; ``E = C + D``."""
    B = T.sblock_alloc_buffer((T.int64(16),))
    C = T.sblock_alloc_buffer((T.int64(16),))
    D = T.sblock_alloc_buffer((T.int64(16),))
    for i in range(T.int64(16)):
        with T.sblock("B"):
            v = T.axis.spatial(T.int64(16), i)
            B[v] = A[v] * T.float32(2) + T.float32(1)
    for i in range(T.int64(16)):
        with T.sblock("C"):
            v = T.axis.spatial(T.int64(16), i)
            C[v] = B[v] + T.float32(1)
    for i in range(T.int64(16)):
        with T.sblock("D"):
            v = T.axis.spatial(T.int64(16), i)
            D[v] = B[v] * T.float32(3)
    for i in range(T.int64(16)):
        with T.sblock("E"):
            v = T.axis.spatial(T.int64(16), i)
            E[v] = C[v] + D[v]


@T.prim_func(private=True, s_tir=True)
def shared_kept(A: T.Buffer((T.int64(16),), "float32"), E: T.Buffer((T.int64(16),), "float32")):
    """``B`` (five nodes) written once, ``C`` and ``D`` (one reader each) inlined."""
    B = T.sblock_alloc_buffer((T.int64(16),))
    for i in range(T.int64(16)):
        with T.sblock("B"):
            v = T.axis.spatial(T.int64(16), i)
            T.reads(A[v])
            T.writes(B[v])
            B[v] = A[v] * T.float32(2) + T.float32(1)
    for i in range(T.int64(16)):
        with T.sblock("E"):
            v = T.axis.spatial(T.int64(16), i)
            T.reads(B[v])
            T.writes(E[v])
            E[v] = B[v] + T.float32(1) + B[v] * T.float32(3)


@T.prim_func(private=True, s_tir=True)
def shared_inlined(A: T.Buffer((T.int64(16),), "float32"), E: T.Buffer((T.int64(16),), "float32")):
    """Every block inlined: ``B``'s expression copied into both of its readers' places."""
    for i in range(T.int64(16)):
        with T.sblock("E"):
            v = T.axis.spatial(T.int64(16), i)
            T.reads(A[v])
            T.writes(E[v])
            E[v] = (
                A[v] * T.float32(2) + T.float32(1) + T.float32(1)
                + (A[v] * T.float32(2) + T.float32(1)) * T.float32(3)
            )  # fmt: skip


def test_an_expression_over_the_limit_read_twice_keeps_its_buffer():
    with patch.object(common, "SHARED_INLINE_MAX_NODES", 4):
        sch, blocks = common.spatial_inlined(shared)
    assert [sch.get(b).name_hint for b in blocks] == ["B", "E"]
    tvm.ir.assert_structural_equal(sch.mod["main"], shared_kept)


def test_an_expression_within_the_limit_is_copied_into_each_reader():
    sch, blocks = common.spatial_inlined(shared)
    assert [sch.get(b).name_hint for b in blocks] == ["E"]
    tvm.ir.assert_structural_equal(sch.mod["main"], shared_inlined)


def _split_concat_twice(bb, x):
    """BAT-ResNeXt's attention pattern: a reshape split eight ways and concatenated, the
    concatenation split eight ways again and concatenated along the other axis."""
    pieces = relax.op.split(relax.op.reshape(x, (8, 64)), 8, axis=1)
    first = relax.op.concat([pieces[i] for i in range(8)], axis=0)  # (64, 8)
    again = relax.op.split(first, 8, axis=0)
    return relax.op.concat([again[i] for i in range(8)], axis=1)  # (8, 64)


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, CPU), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_a_concatenation_read_by_eight_pieces_is_written_once_and_computes_the_same():
    mod = fused_body([(1, 8, 8, 8)], _split_concat_twice, CPU)
    with patch.object(common, "SHARED_INLINE_MAX_NODES", 64):  # reshape 17 nodes, concat 220
        scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:injective"}
    assert [b.name_hint for b in _blocks(scheduled)] == ["T_concat", "T_concat1"]
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype("float32")
    np.testing.assert_array_equal(_run(scheduled, x), _run(mod, x))
    whole = schedule_kernels(mod, "rules")  # within the default limit: one block, the same
    assert [b.name_hint for b in _blocks(whole)] == ["T_concat1"]
    np.testing.assert_array_equal(_run(whole, x), _run(mod, x))


def _blocks(mod: tvm.IRModule) -> list:
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    sch = tvm.s_tir.Schedule(func)
    return [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
