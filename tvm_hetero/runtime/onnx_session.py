"""ONNX Runtime, the runtime a user would deploy instead, run as every timing beside ours runs it:
on a device's cores with its threads, the same inputs, each run timed on its own. Used here
(:class:`tvm_hetero.optimize.peer.OnnxRuntimePeer`) and on a cluster's worker, inside the
emulated or real device the worker is (``tvm_hetero.worker.onnxruntime_open``, run by the data
port's ``onnxruntime`` command)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.runtime.stats import warm_up

_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
}  # fmt: skip
"""ONNX Runtime's input types, as numpy's."""


def session_options(intra: int = 0, inter: int = 1) -> Any:
    """ONNX Runtime's session options as every timing beside ours sets them: ``intra`` /
    ``inter`` op threads (0: ONNX Runtime's choice), errors only in the log, and the threads'
    spinning stopped when a run ends (``session.force_spinning_stop``). By default ONNX
    Runtime's pool threads keep spinning after a run; timed in rounds beside ours on the same
    cores, they slowed our next round (a 1-D max pool: 0.4 ms alone, 4 ms after ONNX
    Runtime's round). Spinning within a run, which ONNX Runtime's latency gains from, stays."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = intra, inter
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    return opts


class OnnxSession:
    """An ONNX Runtime CPU session of ``path`` on ``cores`` (pinned: the calling thread, whose
    affinity the session's pool threads inherit, and each thread that runs it, as ONNX
    Runtime's caller is one of its intra-op threads; none: as the threads are) with ``threads``
    intra-op threads (0: one a core of ``cores``, or ONNX Runtime's choice), fed ``inputs`` in
    the model's input order (:meth:`timed`; :meth:`run` takes its own).

    Raises
    ------
    ImportError
        When ``onnxruntime`` is not installed here.
    """

    def __init__(
        self, path: str | Path, threads: int, cores: Sequence[int],
        inputs: Sequence[np.ndarray] | None = None,
    ) -> None:  # fmt: skip
        import onnxruntime as ort

        self.cores, self._pinned = tuple(cores), threading.local()
        self._pin()
        opts = session_options(threads or len(cores) or 0)
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.name, self.declared = Path(path).name, self.session.get_inputs()
        self.feeds = self.feed(inputs) if inputs is not None else {}

    def _pin(self) -> None:
        """This thread on the session's cores (once a thread)."""
        if self.cores and not getattr(self._pinned, "done", False):
            os.sched_setaffinity(0, self.cores)
            self._pinned.done = True

    def feed(self, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """``inputs`` by the model's input names, as the types it declares (an exporter's
        int64 ids given as a zoo model's int32: ONNX Runtime takes its own type)."""
        if len(self.declared) != len(inputs):
            raise ValueError(f"{self.name} takes {len(self.declared)} inputs, got {len(inputs)}")
        return {
            i.name: np.asarray(a).astype(_TYPES.get(i.type, np.asarray(a).dtype), copy=False)
            for i, a in zip(self.declared, inputs, strict=True)
        }

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One run on ``inputs`` (this thread pinned first); the outputs."""
        self._pin()
        return self.session.run(None, self.feed(inputs))

    def timed(self, runs: int, warmup: int = 0) -> list[float]:
        """Up to ``warmup`` untimed runs (:func:`~tvm_hetero.runtime.stats.warm_up`), then
        each of ``runs`` runs' seconds."""
        warm_up(lambda: self.session.run(None, self.feeds), warmup)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            self.session.run(None, self.feeds)
            samples.append(time.perf_counter() - start)
        return samples
