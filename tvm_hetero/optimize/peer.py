"""ONNX Runtime beside our candidates: the runtime a user would deploy instead, on the same
cores with the same threads, timed in the same rounds."""

from __future__ import annotations

import contextlib
import gc
import json
import queue
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
from tvm_hetero.runtime.stats import warm_up


def onnxruntime_missing(source: Any) -> str | None:
    """None when ONNX Runtime can run ``source`` here; else why not."""
    if not (isinstance(source, str | Path) and str(source).endswith(".onnx")):
        return "the model is not an ONNX file"
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnxruntime is not installed (pip install onnxruntime)"
    return None


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
            from tvm_hetero.runtime.onnx_session import OnnxSession

            cores = self.device.cores or ()
            session = OnnxSession(path, self.device.threads or 0, cores, self.inputs)
        except BaseException as err:  # reported to the caller, not lost in this thread
            self._done.put(err)
            return
        self._done.put(None)
        while (job := self._jobs.get()) is not None:
            try:
                self._done.put(session.timed(*job))
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


class RemoteOnnxRuntimePeer:
    """ONNX Runtime on a cluster's device: its worker runs the session (on the device's cores and
    threads, inside whatever namespace and CPU quota the worker has), the ONNX file uploaded
    there once (the worker keeps it by content). Called like :class:`OnnxRuntimePeer`, but each
    run is timed here, as our candidates' runs on a cluster are: the inputs go to the worker's
    data port with the command, the outputs come back in its answer. A worker serves one
    session at a time, so :func:`~tvm_hetero.runtime.executor.interleaved_run_seconds` lets this
    peer go (:meth:`release`) when a candidate needs its worker (``worker_id``), and the next
    call opens it again, with the first call's warm-up.

    Raises
    ------
    RunError
        When the worker cannot be reached or cannot run ONNX Runtime (not installed there, a
        file it refuses, inputs it refuses), naming the device.
    """

    def __init__(
        self, path: str | Path, device: DeviceSpec, inputs: Sequence[np.ndarray],
        timeout_s: float = 60.0,
    ) -> None:  # fmt: skip
        if device.kind is not DeviceKind.CPU:
            raise ValueError(f"ONNX Runtime runs on a CPU, not {device.name}")
        self.path, self.device = Path(path), device
        self.inputs = [np.ascontiguousarray(a) for a in inputs]
        self.worker_id, self.timeout_s = device.worker_id, timeout_s
        self._session: Any = None
        self._asker: Any = None
        self._port: tuple[str, int] = ("", 0)
        self._warmup = 0

    def open(self) -> None:
        """Connect, upload the file, open the session there (nothing when it is open)."""
        from tvm_hetero.runtime.remote_worker import check_protocol, connect_worker

        if self._session is not None:
            return
        self._session, address = connect_worker(self.device, self.timeout_s)
        with self._failing("opening ONNX Runtime"):
            check_protocol(self._session, f"{self.device.name} ({address[0]})", self.device.name)
            self._port = (address[0], self._opened(address[0]))

    def _opened(self, host: str) -> int:
        """The worker's data port, once the file is there and its session open."""
        from tvm_hetero.runtime.rpc_worker import PREFIX
        from tvm_hetero.runtime.tensor_link import TensorFetcher
        from tvm_hetero.runtime.uploads import upload

        port = int(self._session.get_function(PREFIX + "data_port")())
        upload(host, port, self.path, "model.onnx", self.timeout_s)
        spec = json.dumps(self.device.to_dict())
        takes = self._session.get_function(PREFIX + "onnxruntime_open")("model.onnx", spec)
        if takes != len(self.inputs):
            raise ValueError(f"{self.path.name} takes {takes} inputs, got {len(self.inputs)}")
        self._asker = TensorFetcher(self.timeout_s)
        return port

    def run(self) -> list[np.ndarray]:
        """One run there, its outputs in the model's order (the session opened first)."""
        self.open()
        with self._failing("running ONNX Runtime"):
            return self._ask()

    def _ask(self) -> list[np.ndarray]:
        """One run there, from here: the inputs sent, the outputs back."""
        from tvm_hetero.runtime.rpc_worker import ONNXRUNTIME, read_status_answer

        message = {ONNXRUNTIME: len(self.inputs)}
        answer = self._asker.ask(*self._port, message, answer_s=self.timeout_s, after=self.inputs)
        # a worker's failure: WorkerSaid, a RuntimeError
        outputs = read_status_answer(answer).tensors
        return [outputs[0, str(i)] for i in range(len(outputs))]

    def __call__(self, runs: int, warmup: int = 0) -> list[float]:
        self._warmup = max(self._warmup, warmup)
        fresh = self._session is None
        self.open()
        with self._failing("running ONNX Runtime"):
            warm_up(self._ask, self._warmup if fresh else warmup)
            samples = []
            for _ in range(runs):
                start = time.perf_counter()
                self._ask()
                samples.append(time.perf_counter() - start)
            return samples

    @contextlib.contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """Errors of ``what`` as a :class:`RunError` naming the device; the session let go."""
        from tvm_hetero.errors import RunError
        from tvm_hetero.runtime.remote_worker import error_line

        try:
            yield
        except (RuntimeError, OSError, ValueError) as err:  # TVMError, a link's, the upload's
            traceback.clear_frames(err.__traceback__)  # their tensors hold the session
            self.release()
            if isinstance(err, RunError):  # check_protocol's, which says it all
                raise RunError(str(err), self.device.name) from None
            where = f"{self.device.name} ({self.device.host})"
            said = f"{what} on {where} failed: {error_line(err)}"
            raise RunError(said, self.device.name) from None

    def release(self) -> None:
        """End the session on the worker now (it serves one at a time)."""
        if self._asker is not None:
            self._asker.close()
        self._asker = self._session = None
        gc.collect()  # what the session's calls made holds it in reference cycles

    close = release
