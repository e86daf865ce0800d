"""The ``tvm-hetero`` command line."""
