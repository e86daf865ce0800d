"""The concurrent runtime: dispatch cost per unit, one unit vs the single VM, two branches on two
core sets vs one device on both cores.

    .venv/bin/python benchmarks/runtime/bench.py [--repeat 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.build.multi_device import build
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.workloads import chain_module
from tvm_hetero.plan import Placement
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.vm import make_vm
from tvm_hetero.runtime.worker import configure_threads
from tvm_hetero.zoo import load_zoo_model

CHAIN = 64


def chain_model():
    """64 tiny element-wise ops; placed alternately on two core sets they are 64 units."""
    return load_model(chain_module(CHAIN), name="chain"), {"x": np.zeros((8,), "float32")}


N = 512


@I.ir_module
class TwoBranches:
    @R.function
    def main(x: R.Tensor((N, N), "float32"), y: R.Tensor((N, N), "float32")):
        with R.dataflow():
            a = R.nn.relu(R.matmul(R.nn.relu(R.matmul(x, x)), x))
            b = R.nn.relu(R.matmul(R.nn.relu(R.matmul(y, y)), y))
            out = R.add(a, b)
            R.output(out)
        return out


def call_median_ms(fn, args, repeat):
    """Median of ``repeat`` calls of ``fn(*args)`` from Python, each timed (after 5)."""
    for _ in range(5):
        fn(*args)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)) * 1e3


def median_ms(compiled, inputs, repeat):
    with Executor(compiled.deployment) as ex:
        return ex.time(inputs, repeat=repeat, warmup=5).median_ms


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--out")
    args = p.parse_args()
    results = {}
    c0, c1, cpu = resolve_device("cpu@0"), resolve_device("cpu@1"), resolve_device("cpu")

    # 1. dispatch cost: the chain as 64 units alternating between two workers, and on one
    model, inputs = chain_model()
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    alternating = Placement(("cpu@0", "cpu@1"), {n: 1 for i, n in enumerate(ids) if i % 2})
    one = api.compile(model, [cpu])
    both = api.compile(model, [c0, c1], alternating)
    t_one, t_both = median_ms(one, inputs, args.repeat), median_ms(both, inputs, args.repeat)
    units = len(both.deployment.units)
    results["dispatch_us_per_unit"] = (t_both - t_one) * 1e3 / units
    results["chain_units"] = units
    print(
        f"chain of {CHAIN} adds: one unit {t_one * 1e3:.1f} us; {units} units alternating "
        f"cpu@0/cpu@1 {t_both * 1e3:.1f} us -> {results['dispatch_us_per_unit']:.1f} us/unit"
    )

    # 2. one-unit deployment vs today's single VM (same executable)
    for name in ("mlp", "bert-small", "resnet18"):
        m = load_zoo_model(name)
        x = m.random_inputs()
        compiled = api.compile(m, [cpu])
        configure_threads(cpu)
        vm = make_vm(build(compiled.placed), [tvm.cpu(0)])
        args_ = [tvm.runtime.tensor(a) for a in api.ordered_args(m.inputs, x)]
        vm_ms = (
            float(
                np.median(
                    vm.time_evaluator("main", tvm.cpu(0), number=1, repeat=args.repeat // 4)(
                        *args_
                    ).results
                )
            )
            * 1e3
        )
        dep_ms = median_ms(compiled, x, args.repeat // 4)
        call_ms = call_median_ms(vm["main"], args_, args.repeat)
        results[f"one_unit_{name}"] = {
            "vm_ms": vm_ms, "deployment_ms": dep_ms, "call_ms": call_ms,
            "overhead_us": (dep_ms - call_ms) * 1e3,
        }  # fmt: skip
        print(
            f"{name}: single VM {vm_ms:.3f} ms, one-unit deployment {dep_ms:.3f} ms "
            f"({dep_ms / vm_ms:.3f}x); the VM function called from Python {call_ms:.3f} ms: "
            f"the executor adds {(dep_ms - call_ms) * 1e3:.1f} us a run"
        )

    # 3. two branches at batch 1: cpu@0 + cpu@1 against cpu (both cores, one worker)
    model = load_model(TwoBranches, name="two-branches")
    rng = np.random.default_rng(0)
    inputs = {n: (rng.standard_normal((N, N)) / N).astype("float32") for n in ("x", "y")}
    order = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    second = {n: 1 for n in order[len(order) // 2 : -1]}  # the y branch; the add stays home
    split = api.compile(model, [c0, c1], Placement(("cpu@0", "cpu@1"), second))
    whole = api.compile(model, [cpu])
    t_split, t_whole = median_ms(split, inputs, 30), median_ms(whole, inputs, 30)
    results["two_branches"] = {
        "cpu0_cpu1_ms": t_split,
        "cpu_ms": t_whole,
        "ratio": t_whole / t_split,
    }
    print(
        f"two branches {N}x{N}: cpu@0 + cpu@1 {t_split:.2f} ms, cpu (2 threads) {t_whole:.2f} ms "
        f"-> {t_whole / t_split:.2f}x"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
