"""TVM imported without torch, for processes that never hold a torch tensor.

``tvm_ffi`` imports torch, when it is installed, at its own import (to convert torch tensors
by DLPack): 3-4 s of the 5-6 s that ``import tvm`` took on this project's hosts (2026-12-02),
paid by every worker, every deployment timed apart and every box measurement at its start.
Those processes run compiled code on TVM's own tensors only; they call
:func:`import_tvm_without_torch` before anything imports TVM.
"""

from __future__ import annotations

import sys


def import_tvm_without_torch() -> None:
    """Import ``tvm`` with torch hidden from ``tvm_ffi``'s import; a later ``import torch``
    works as usual (only ``tvm_ffi``'s conversion of torch tensors is missing). Nothing is
    done where TVM or torch is loaded already."""
    if "tvm_ffi" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # import torch raises ImportError
    try:
        import tvm  # noqa: F401
    finally:
        del sys.modules["torch"]
