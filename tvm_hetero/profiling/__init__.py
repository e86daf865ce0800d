"""Measurement: records, the profile database, and the profilers built on ``time_evaluator``.

Kept free of imports so that the offline runner (``python -m tvm_hetero.runtime.offline_runner``)
needs only the TVM runtime on the machine it runs on.
"""
