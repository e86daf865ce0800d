"""Errors the command line reports as one line (no traceback), importable without TVM."""


class BuildError(RuntimeError):
    """A module that cannot be built as asked."""


class RunError(RuntimeError):
    """A unit or copy of a deployment failed, or a run did not finish in time."""
