"""A Disco worker's entry point for ``probe.py``: the runtime's extra library (where Disco
lives) loaded before ``tvm``, then the point-to-point functions of ``p2p.py`` registered, then
TVM's own worker loop.

After a plain ``import tvm``, ``tvm.runtime.disco`` is ``None`` in 0.27: ``runtime/__init__``
imports it before the extra library is loaded (``../shared/notes/TVM027.md``, G-disco-import).
"""

import ctypes
import importlib.util
import os
import sys

import tvm_ffi  # noqa: F401  (loads libtvm_ffi, which the runtime libraries link)

LIB = os.path.join(os.path.dirname(importlib.util.find_spec("tvm").origin), "lib")
ctypes.CDLL(os.path.join(LIB, "libtvm_runtime.so"), ctypes.RTLD_GLOBAL)
ctypes.CDLL(os.path.join(LIB, "libtvm_runtime_extra.so"), ctypes.RTLD_GLOBAL)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import p2p  # noqa: E402, F401
from tvm.exec.disco_worker import main  # noqa: E402

if __name__ == "__main__":
    main()
