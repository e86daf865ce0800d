"""The pieces rule: concatenations (and what is fused after them) as one block per input."""

import numpy as np
import pytest
import tvm
from conftest import fused_body, kernel_script
from tvm import relax

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.build.tuning import replays
from tvm_hetero.devices import cpu_device
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu.pieces import Pieces

AVX512 = {**cpu_device().target, "mcpu": "znver4", "num-cores": 2}
"""16 float lanes: the expected vectors are written for them (the code is only compiled and
run where the host has AVX-512; elsewhere the schedule's text is checked alone)."""
CPU = make_target(AVX512)
SERIAL = make_target({**AVX512, "num-cores": 1})


def _module(shapes, body, target=CPU):
    return fused_body(shapes, body, target)


def _concat(axis):
    return lambda bb, *xs: relax.op.concat(xs, axis=axis)


def _concat_scale_relu(bb, a, b, scale):
    y = relax.op.multiply(relax.op.concat([a, b], axis=1), scale)
    return relax.op.nn.relu(y)


def _host_has_avx512() -> bool:
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        return "avx512f" in info.read()


CASES = {  # shapes, body, lanes of each piece's vector (in order), whether it runs in parallel
    "squeezenet_fire": (  # 64 + 64 channels of 55 x 55: each input one run, whole vectors
        [(1, 64, 55, 55), (1, 64, 55, 55)], _concat(1), [16, 16], True,
    ),
    "vovnet_rows_of_56": (  # 56 x 56: whole vectors of each map cross rows; rows of 14
        [(1, 64, 56, 56), (1, 128, 56, 56)], _concat(1), [14, 14], True,
    ),
    "three_inputs_small": (  # 2, 3 and 4 channels of 5 x 5: runs of 50, 75, 100
        [(1, 2, 5, 5), (1, 3, 5, 5), (1, 4, 5, 5)], _concat(1), [10, 15, 10], False,
    ),
    "last_axis": (  # rows of 24 + 40: each piece a run of its row
        [(8, 24), (8, 40)], _concat(1), [12, 10], False,
    ),
    "then_channel_scale_relu": (  # the scale is read once a channel: a run of each map
        [(1, 16, 8, 8), (1, 16, 8, 8), (1, 32, 1, 1)], _concat_scale_relu, [16, 16], False,
    ),
    "pad_rows_no_vector_divides": (  # 112 -> 113 on two axes: four pieces, two rows of 112
        [(1, 16, 112, 112)], lambda bb, x: relax.op.nn.pad(x, [0, 0, 0, 0, 0, 1, 0, 1]),
        [16, 16], True,
    ),
    "pad_all_sides_to_58": (  # 56 -> 58: nine pieces, three with rows of 56 in vectors of 14
        [(1, 64, 56, 56)], lambda bb, x: relax.op.nn.pad(x, [0, 0, 0, 0, 1, 1, 1, 1]),
        [14, 14, 14], True,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_input_is_a_block_of_whole_vectors_with_no_choice_left(case):
    shapes, body, lanes, parallel = CASES[case]
    mod = _module(shapes, body)
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:pieces"}
    text = kernel_script(scheduled)
    assert "if_then_else" not in text, text
    vectors = [int(line.split("T.int64(")[1].split(")")[0])
               for line in text.splitlines() if "T.vectorized" in line]  # fmt: skip
    assert vectors == lanes, text
    assert ("T.parallel" in text) is parallel
    if not _host_has_avx512():
        return
    rng = np.random.default_rng(0)
    arrays = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in shapes]
    got = relax.VirtualMachine(tvm.compile(scheduled, CPU), tvm.cpu())["main"](*arrays)
    want = relax.VirtualMachine(tvm.compile(mod, CPU), tvm.cpu())["main"](*arrays)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_without_rows_of_vectors_a_map_of_56_is_cut_in_vectors_across_its_rows():
    """:data:`ROWS_OF_VECTORS` off: VoVNet's 56 x 56 pieces are whole vectors of 16 of each
    map's run, crossing its rows (what LLVM computed lane by lane)."""
    from unittest.mock import patch

    from tvm_hetero.schedules.cpu import common

    shapes, body, _, _ = CASES["vovnet_rows_of_56"]
    with patch.object(common, "ROWS_OF_VECTORS", False):
        text = kernel_script(schedule_kernels(_module(shapes, body), "rules"))
    vectors = [line for line in text.splitlines() if "T.vectorized" in line]
    assert len(vectors) == 2 and all("T.int64(16)" in line for line in vectors), text


def _transposed_first(bb, a, b):
    return relax.op.concat([relax.op.permute_dims(a, [0, 1, 3, 2]), b], axis=1)


@pytest.mark.parametrize(
    ("shapes", "body"),
    [
        ([(1, 64, 55, 55), (1, 64, 55, 55)], _concat(1)),  # runs of memory
        ([(1, 64, 64, 64), (1, 64, 64, 64)], _transposed_first),  # a piece vectorized by row
    ],
)
def test_a_serial_target_gets_the_pieces_with_no_parallel_loop(shapes, body):
    """The rule's schedule is of a function of its own: a parallel step left for
    ``CpuRule.apply`` to drop would have been replayed on the kernel as given (the piece
    read transposed came back as one block choosing per element)."""
    scheduled = schedule_kernels(_module(shapes, body, SERIAL), "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:pieces"}
    text = kernel_script(scheduled)
    assert "T.parallel" not in text and "T.vectorized" in text
    assert "if_then_else" not in text, text


@pytest.mark.parametrize(
    ("shape", "body"),
    [  # over two axes, rows of 10: one block chooses per vector of 10 lanes (of 16)
        ((1, 4, 8, 8), lambda bb, x: relax.op.nn.pad(x, [0, 0, 0, 0, 1, 1, 1, 1])),
        ((1, 4, 8, 8), lambda bb, x: relax.op.nn.relu(x)),  # no choice at all
        ((1, 4, 6, 111), lambda bb, x: relax.op.nn.pad(x, [0, 0, 1, 1, 1, 1, 1, 1])),  # 27
    ],
)
def test_kernels_one_block_serves_or_too_many_pieces_are_not_this_rules(shape, body):
    mod = _module([shape], body)
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    assert Pieces().apply(func, CPU, False) is None


def test_a_symbolic_concatenation_is_left_to_the_injective_rule():
    n = tvm.tirx.Var("n", "int64")
    mod = _module([(n, 4), (n, 4)], _concat(1))
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    assert Pieces().apply(func, CPU, False) is None


def test_its_schedule_is_not_a_tuning_seed_while_a_replayable_one_is():
    """A record is a trace replayed on the workload: the rule schedules a function of its own,
    whose trace does not replay; the injective rule's does."""
    concat = _module([(1, 4, 8, 8), (1, 4, 8, 8)], _concat(1))
    (func,) = [f for _, f in concat.functions_items() if isinstance(f, PrimFunc)]
    assert not replays(Pieces().apply(func, CPU, False), func)
    relu = _module([(1, 4, 8, 8)], lambda bb, x: relax.op.nn.relu(x))
    (func,) = [f for _, f in relu.functions_items() if isinstance(f, PrimFunc)]
    from tvm_hetero.schedules.cpu import Injective

    assert replays(Injective().apply(func, CPU, False), func)
