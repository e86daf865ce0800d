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
"""
