"""The one home of everything that runs compiled code.

Only the TVM runtime is imported here (``tvm``, ``tvm.runtime``): a GPU or edge box has no
compiler, and ``tests/runtime/test_runtime_only.py`` runs this package with
``TVM_USE_RUNTIME_LIB=1`` to keep it so.

- :mod:`.deployment`: the executable format (units, copies, home inputs / outputs) and its ``.tar``
- :mod:`.device`: device specs to runtime devices; CPU core sets
- :mod:`.worker`: a worker per device (its own VM, thread, cores); :mod:`.executor` runs a
  deployment's units on them as soon as their inputs exist and records the timeline
- :mod:`.vm`, :mod:`.timer`, :mod:`.measure`: one VM, ``time_evaluator`` runners, adaptive timing
- :mod:`.offline_runner`, :mod:`.rpc_worker`: timing on machines with the runtime only
- :mod:`.onnx_session`: ONNX Runtime, the peer, run here or by a cluster's worker
- :mod:`.claiming_pool`: TVM's parallel kernels on a pool whose caller takes what its workers
  have not, installed when :mod:`.worker` is imported, before any module is loaded
"""

import os

POOL_SPIN_COUNT = 2000
"""How many times (a ``sched_yield`` each) a thread of TVM's CPU pool looks for the next
parallel task before it sleeps, unless ``TVM_THREAD_POOL_SPIN_COUNT`` says otherwise; TVM reads
it once, when the process's first pool thread starts. TVM's own default, 300,000, kept a pool
thread on its core for 150-200 ms after every request (measured from the thread's CPU time on
this host, 2026-11-29): whatever ran next on that core (ONNX Runtime timed beside us, another
candidate, the user's work) lost it meanwhile, and ONNX Runtime on two threads timed after our
rounds took three times its time in some processes. Two thousand turns still span the gaps
between one request's kernels; ONNX Runtime's threads likewise stop spinning when a run ends
(``runtime.onnx_session.session_options``)."""

os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(POOL_SPIN_COUNT))
