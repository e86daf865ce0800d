"""Errors the command line reports as one line (no traceback), importable without TVM."""


class BuildError(RuntimeError):
    """A module that cannot be built as asked."""


class RunError(RuntimeError):
    """A unit or copy of a deployment failed, or a run did not finish in time.

    ``device`` names the device whose worker failed or did not answer, when that is known
    (``tvm-hetero run --replan`` plans again without it).
    """

    def __init__(self, message: str, device: str | None = None) -> None:
        super().__init__(message)
        self.device = device
