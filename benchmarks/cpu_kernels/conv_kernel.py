"""One ``relu(conv2d)`` kernel as the CPU rules see it, compiled and timed alone: what
``conv_tiles.py`` and ``narrow_convs.py`` schedule in their own ways."""

from __future__ import annotations

import numpy as np


def conv_relu_func(x_shape, w_shape, stride, padding, groups: int = 1):  # -> tirx.PrimFunc
    """The fused, legalized ``relu(conv2d(x, w))`` kernel, unscheduled."""
    from tvm import relax

    from tvm_hetero._compat import PrimFunc

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, w, strides=stride, padding=padding, groups=groups)
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    mod = relax.transform.FuseTIR()(
        relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
    )
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    return func


def kernel_us(
    kernel, target, number: int = 20, repeat: int = 5, inputs: list | None = None
) -> tuple[float, np.ndarray]:
    """Microseconds of one call of the scheduled ``kernel`` built for ``target`` (the median of
    ``repeat`` x ``number``) on ``inputs`` (every argument but the output; random where not
    given), and its output."""
    import tvm

    lib = tvm.compile(tvm.IRModule({"k": kernel.with_attr("global_symbol", "k")}), target)
    lib = getattr(lib, "mod", lib)
    rng = np.random.default_rng(0)
    args = [
        tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.shape]).astype(p.dtype))
        for p in kernel.params
    ]
    for k, value in enumerate(inputs or []):
        args[k] = tvm.runtime.tensor(value)
    us = lib.time_evaluator("k", tvm.cpu(), number=number, repeat=repeat)(*args).median * 1e6
    return us, args[-1].numpy()
