"""StackLoopBuffers: CPU buffers allocated inside loops go on the stack, no others."""

import numpy as np
import onnx
import tvm
from onnx import TensorProto, helper
from tvm.script import tirx as T

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import StackLoopBuffers
from tvm_hetero.passes.stack_loop_buffers import MAX_KERNEL_BYTES, STACK_ANNOTATION, stacked


@T.prim_func
def _before(a: T.Buffer((8, 1500), "float32"), b: T.Buffer((8, 1500), "float32")):
    T.attr("default", "device_type", 1)
    whole = T.alloc_buffer((1500,))  # once a call: the pool's
    for i in T.parallel(8):
        row = T.alloc_buffer((1500,))  # 6,000 bytes a row: the stack's
        small = T.alloc_buffer((16,))  # under 1 KiB: LowerTVMBuiltin's stack already
        large = T.alloc_buffer((20000,))  # 80,000 bytes: the pool's
        acc = T.alloc_buffer((1500,), scope="local")  # a register tile: the stack's too
        tile = T.alloc_buffer((7,), scope="local")  # however small: TVM keeps only global ones
        vectors = T.alloc_buffer((121,), "float32x16")  # 7,744 bytes, not 484: the stack's
        for j in range(1500):
            row[j] = a[i, j] * T.float32(2)
            acc[j] = row[j]
        small[0] = row[0]
        large[0] = small[0]
        tile[0] = large[0]
        vectors[0] = T.Broadcast(tile[0], 16)
        for j in range(1500):
            b[i, j] = acc[j] + whole[j] + large[0]


@T.prim_func
def _expected(a: T.Buffer((8, 1500), "float32"), b: T.Buffer((8, 1500), "float32")):
    T.attr("default", "device_type", 1)
    whole = T.alloc_buffer((1500,))
    for i in T.parallel(8):
        row = T.alloc_buffer((1500,), annotations={"disable_lower_builtin": 1})
        small = T.alloc_buffer((16,))
        large = T.alloc_buffer((20000,))
        acc = T.alloc_buffer((1500,), scope="local", annotations={"disable_lower_builtin": 1})
        tile = T.alloc_buffer((7,), scope="local", annotations={"disable_lower_builtin": 1})
        vectors = T.alloc_buffer((121,), "float32x16", annotations={"disable_lower_builtin": 1})
        for j in range(1500):
            row[j] = a[i, j] * T.float32(2)
            acc[j] = row[j]
        small[0] = row[0]
        large[0] = small[0]
        tile[0] = large[0]
        vectors[0] = T.Broadcast(tile[0], 16)
        for j in range(1500):
            b[i, j] = acc[j] + whole[j] + large[0]


@T.prim_func
def _on_a_gpu(a: T.Buffer((8, 1500), "float32")):
    T.attr("default", "device_type", 2)
    for i in range(8):
        row = T.alloc_buffer((1500,))
        for j in range(1500):
            row[j] = a[i, j]
        a[i, 0] = row[1499]


@T.prim_func
def _many_rows(a: T.Buffer((8, 15000), "float32")):
    T.attr("default", "device_type", 1)
    for i in range(8):
        r0 = T.alloc_buffer((15000,))
        r1 = T.alloc_buffer((15000,))
        r2 = T.alloc_buffer((15000,))
        r3 = T.alloc_buffer((15000,))
        r4 = T.alloc_buffer((15000,))
        for j in range(15000):
            r0[j] = a[i, j]
            r1[j] = r0[j]
            r2[j] = r1[j]
            r3[j] = r2[j]
            r4[j] = r3[j]
            a[i, j] = r4[j]


def test_a_buffer_in_a_loop_of_1_to_64_kib_or_a_register_tile_goes_on_the_stack():
    mod = StackLoopBuffers()(tvm.IRModule({"main": _before}))
    tvm.ir.assert_structural_equal(_named(mod["main"]), _named(_expected))


def _named(func):
    return func.with_attr("global_symbol", "main")


def test_a_kernel_without_one_is_left_as_it_is():
    assert stacked(_expected) is _expected  # annotated already
    mod = tvm.IRModule({"main": _on_a_gpu})
    assert StackLoopBuffers()(mod)["main"].same_as(mod["main"])  # device memory: the pool's


def test_a_kernel_puts_no_more_than_its_budget_on_the_stack():
    allocs = []
    _collect(stacked(_many_rows).body, allocs)
    marked = [a for a in allocs if STACK_ANNOTATION in a.annotations]
    assert len(allocs) == 5 and len(marked) == MAX_KERNEL_BYTES // 60000 == 4
    assert [a.buffer.name for a in marked] == ["r0", "r1", "r2", "r3"]


def _collect(stmt, out: list) -> None:
    if isinstance(stmt, tvm.tirx.AllocBuffer):
        out.append(stmt)
    for child in (getattr(stmt, "body", None), *getattr(stmt, "seq", ())):
        if isinstance(child, tvm.tirx.Stmt):
            _collect(child, out)


def test_a_softmax_over_long_rows_asks_the_pool_for_nothing_and_matches_numpy(tmp_path):
    """Each row's ``exp`` (1,500 floats) and the rows' partial maxima: before the pass, two
    workspace allocations inside the row loop of the kernel's LLVM code."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    compiled = _one_node_build(tmp_path, node, (2, 64, 1500))
    x = np.random.default_rng(0).standard_normal((2, 64, 1500), dtype=np.float32) * 4
    want = np.exp(x - x.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(api.run(compiled, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    assert not _asks_the_pool(compiled)


def test_a_depthwise_convolutions_tasks_ask_the_pool_for_nothing_and_match_numpy(tmp_path):
    """The channel-vectorized tile of a 5x5 depthwise convolution over a 7 x 7 map (36
    tasks): each task's padded input (121 vectors of 16 floats, counted as 484 bytes while a
    buffer's lanes were left out) and its register tile (``local``) had each been asked of the
    pool once a task."""
    channels = 576
    w = np.random.default_rng(1).standard_normal((channels, 1, 5, 5)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=channels, pads=[2, 2, 2, 2])
    weights = helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel().tolist())
    compiled = _one_node_build(tmp_path, node, (1, channels, 7, 7), [weights])
    x = np.random.default_rng(0).standard_normal((1, channels, 7, 7), dtype=np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    want = np.zeros_like(x)
    for dy in range(5):
        for dx in range(5):
            want += padded[:, :, dy : dy + 7, dx : dx + 7] * w[None, :, 0, dy, dx, None, None]
    np.testing.assert_allclose(api.run(compiled, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    assert not _asks_the_pool(compiled)


def _one_node_build(tmp_path, node, shape: tuple, initializers: list = ()):
    """``node`` (``x`` in, ``y`` out, both of ``shape``) as an ONNX file, compiled for the
    whole CPU."""
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([node], "one", [x_info], [y_info], list(initializers))
    path = tmp_path / "one.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return api.compile(load_model(str(path)), [resolve_device("cpu")])


def _asks_the_pool(compiled) -> bool:
    """Whether ``compiled``'s LLVM code calls the workspace pool anywhere (it has some code)."""
    sources = _llvm_sources(compiled.deployment.libraries[0].mod)
    assert sources
    return any("TVMBackendAllocWorkspace" in s for s in sources)


def _llvm_sources(module: tvm.runtime.Module) -> list[str]:
    found, stack = [], [module]
    while stack:
        m = stack.pop()
        if str(m.kind) == "llvm":
            found.append(m.inspect_source("ll"))
        stack.extend(m.imports)
    return found
