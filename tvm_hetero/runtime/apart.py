"""Time a saved deployment in a process of its own, which gives back all its memory on exit.

TVM 0.27 never frees a library it has loaded (``tvm.runtime.load_module``): each load of a
ViT-Base deployment kept 0.32 GiB, its weights, until the process ended. A search that times
many large candidates again and again (``optimize`` on ViT-Huge, 2.5 GB of weights a build)
cannot hold them all, nor load them anew each round in its own process; it times each one,
each round, here::

    python -m tvm_hetero.runtime.apart MODEL.tar RUNS WARMUP MICROBATCHES

The child loads the deployment and times it with
:func:`~tvm_hetero.runtime.executor.interleaved_run_seconds` in one round (seeded random
inputs, ``WARMUP`` untimed runs, ``RUNS`` timed) and prints ``{"samples_ms": [...]}`` as its
last line of output; a failure is one line on its standard error and exit code 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tvm_hetero.errors import RunError

STEP_TIMEOUT_S = 120.0
"""What an executor timing candidates waits for one step, here and in the child
(``interleaved_run_seconds``)."""
START_S = 300.0
"""What the child may take to start and load its deployment, beyond its runs."""


def time_saved(
    path: str | Path, runs: int, warmup: int, microbatches: int = 1
) -> list[float]:  # fmt: skip
    """Milliseconds of each of ``runs`` timed runs of the deployment saved at ``path``, after
    ``warmup``, in a child process (each sample the time per request of ``microbatches`` in
    flight). Raises :class:`RunError` naming the file when the child fails or overruns
    (:data:`START_S`, and :data:`STEP_TIMEOUT_S` a run)."""
    argv = [sys.executable, "-m", __name__, str(path), str(runs), str(warmup), str(microbatches)]
    limit = START_S + STEP_TIMEOUT_S * (runs + warmup)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise RunError(f"{path}: timing it apart took over {limit:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise RunError(f"{path}: timing it apart failed: {why}")
    return [float(t) for t in json.loads(lines[-1])["samples_ms"]]


def _time_here(path: str, runs: int, warmup: int, microbatches: int) -> list[float]:
    from tvm_hetero.runtime.without_torch import import_tvm_without_torch

    import_tvm_without_torch()  # the child starts 3-4 s sooner, a child each round
    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    with tempfile.TemporaryDirectory() as workdir:
        seconds = interleaved_run_seconds(
            [load(path, workdir)], [runs], rounds=1, warmup=warmup, microbatches=microbatches
        )[0]
    return [t * 1e3 for t in seconds]


def main(argv: list[str]) -> int:
    """The child: time the deployment, print its samples (see the module docstring)."""
    if len(argv) != 4:
        print("usage: python -m tvm_hetero.runtime.apart MODEL.tar RUNS WARMUP MICROBATCHES",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        samples = _time_here(argv[0], int(argv[1]), int(argv[2]), int(argv[3]))
    except Exception as err:  # the parent reports it, naming the file
        print(f"{type(err).__name__}: {err}".replace("\n", " "), file=sys.stderr)
        return 1
    print(json.dumps({"samples_ms": samples}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
