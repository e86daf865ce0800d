"""ONNX Runtime beside our candidates: the runtime a user would deploy instead, on the same
cores with the same threads, timed in the same rounds."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.devices.spec import DeviceKind, DeviceSpec


def onnxruntime_missing(source: Any) -> str | None:
    """None when ONNX Runtime can run ``source`` here; else why not."""
    if not (isinstance(source, str | Path) and str(source).endswith(".onnx")):
        return "the model is not an ONNX file"
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnxruntime is not installed (pip install onnxruntime)"
    return None


def session_options(intra: int = 0, inter: int = 1):
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


class OnnxRuntimePeer:
    """An ONNX Runtime CPU session of ``device``'s threads on its cores, run in a thread of its
    own pinned to them (the session's pool threads inherit the pin). Calling it runs
    ``warmup`` untimed then ``runs`` timed runs and returns each run's seconds. ``inputs`` are
    the model's inputs in its order."""

    def __init__(self, path: str | Path, device: DeviceSpec, inputs: Sequence[np.ndarray]):
        if device.kind is not DeviceKind.CPU:
            raise ValueError(f"ONNX Runtime runs here on a CPU, not {device.name}")
        self.device, self.inputs = device, list(inputs)
        self._jobs: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, args=(str(path),), daemon=True)
        self._thread.start()
        found = self._done.get()
        if isinstance(found, BaseException):
            raise found

    def _serve(self, path: str) -> None:
        try:
            import onnxruntime as ort

            cores = self.device.cores
            if cores:
                os.sched_setaffinity(0, cores)  # this thread; the session's threads inherit it
            opts = session_options(self.device.threads or len(cores or ()) or 0)
            session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            names = [i.name for i in session.get_inputs()]  # the model's inputs, in order
            feeds = dict(zip(names, self.inputs, strict=True))
        except BaseException as err:  # reported to the caller, not lost in this thread
            self._done.put(err)
            return
        self._done.put(None)
        while (job := self._jobs.get()) is not None:
            runs, warmup = job
            try:
                for _ in range(warmup):
                    session.run(None, feeds)
                samples = []
                for _ in range(runs):
                    start = time.perf_counter()
                    session.run(None, feeds)
                    samples.append(time.perf_counter() - start)
                self._done.put(samples)
            except BaseException as err:
                self._done.put(err)

    def __call__(self, runs: int, warmup: int = 0) -> list[float]:
        self._jobs.put((runs, warmup))
        found = self._done.get()
        if isinstance(found, BaseException):
            raise found
        return found

    def close(self) -> None:
        """End the session's thread."""
        self._jobs.put(None)
        self._thread.join(timeout=10)
