"""Helpers shared by the CLI commands: console, argument parsing, model and device loading."""

from __future__ import annotations

import argparse
import functools
import json
import logging
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.logging import RichHandler

from tvm_hetero.errors import BuildError, RunError
from tvm_hetero.strategies.base import Progress
from tvm_hetero.viz.tables import fmt as fmt
from tvm_hetero.viz.tables import table as table

USER_ERRORS = (ConnectionError, ValueError, FileNotFoundError, BuildError, RunError)
"""Reported as one line naming the command. Every tvm-hetero input error (``SpecError``,
``PlanError``, ``ModelLoadError``, ``ArtifactError``, ``ProfileDBError``...) is a ``ValueError``;
this module imports none of them, so ``tvm-hetero run`` needs only the TVM runtime."""


@functools.cache
def console() -> Console:
    """The shared rich console."""
    return Console()


def setup_logging(verbose: bool) -> None:
    """Send tvm_hetero's log to the console (the library itself never configures logging)."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=console(), show_path=False)],
    )


def parse_value(text: str) -> Any:
    """``16`` -> 16, ``[1, 2]`` -> [1, 2], ``abc`` -> "abc"."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_pairs(items: list[str], flag: str, sep: str = "=") -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a malformed item names the flag."""
    out = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key or not value:
            raise ValueError(f"{flag} {item!r}: write KEY{sep}VALUE")
        out[key] = value
    return out


def parse_shape(text: str, flag: str) -> tuple[int, ...]:
    """``1x3x224x224`` -> ``(1, 3, 224, 224)``."""
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"{flag}: shape {text!r} must look like 1x3x224x224") from None
    if not dims or any(d <= 0 for d in dims):
        raise ValueError(f"{flag}: shape {text!r} must have positive dimensions")
    return dims


def model_from_args(args: argparse.Namespace, static: bool = True):
    """Load the model named on the command line; with ``static``, refuse symbolic input
    dimensions (every command that compiles or measures needs shapes)."""
    from tvm_hetero.frontends import load_model

    overrides = {k: parse_value(v) for k, v in parse_pairs(args.model_arg, "--model-arg").items()}
    shapes = {
        k: parse_shape(v, "--input-shape")
        for k, v in parse_pairs(args.input_shape, "--input-shape", ":").items()
    }
    with console().status(f"loading {args.model}"):
        model = load_model(args.model, shapes=shapes or None, **overrides)
    for spec in model.inputs:  # a shape no run could hold is refused before the compile
        flag = "--input-shape" if spec.name in shapes else "--model-arg"
        check_memory(f"{flag}: input {spec.name!r} {tuple(spec.shape)}", spec.nbytes)
    if static:
        from tvm_hetero.api import require_static_inputs

        require_static_inputs(model)
    return model


def devices_from_args(args: argparse.Namespace, default: list[str]):
    """Resolve ``--device`` (default: every device of ``--cluster``, else ``default``) less
    ``--exclude`` into device specs; names must be distinct and core sets disjoint."""
    from tvm_hetero.devices import ClusterSpec, SpecError, resolve_device
    from tvm_hetero.devices.discover import device_name
    from tvm_hetero.devices.spec import arch_number
    from tvm_hetero.runtime.device import check_disjoint

    cluster = ClusterSpec.load(args.cluster) if args.cluster else None
    names = args.device or ([d.name for d in cluster.devices] if cluster else default)
    names = [device_name(n) for n in names]
    excluded = [device_name(n) for n in getattr(args, "exclude", None) or []]
    for name in excluded:
        if name not in names:
            raise SpecError(f"--exclude {name!r} is not one of the devices {names}")
    names = [n for n in names if n not in excluded]
    if not names:
        raise SpecError(f"--exclude leaves no device (devices were {excluded})")
    archs = getattr(args, "cuda_arch", None) or []
    lowest = min(archs, key=arch_number) if archs else None
    devices = [resolve_device(n, cluster, lowest) for n in names]
    seen = [d.name for d in devices]
    dupes = sorted({n for n in seen if seen.count(n) > 1})
    if dupes:
        raise SpecError(
            f"--device {dupes[0]} is given twice; use cpu@N for a CPU worker on its own cores"
        )
    check_disjoint(devices)
    _check_vdevices(devices, args.cluster if cluster else None)
    return devices


def _check_vdevices(devices: list, cluster: str | None) -> None:
    """Two devices of this process that TVM would see as one virtual device
    (``build.vdevices.vdevice_clash``) are refused before any work: planning stopped at
    ``DeclareVDevices`` after its first step (two CPUs of a cluster file, neither given an
    index)."""
    from tvm_hetero.build.vdevices import vdevice_clash
    from tvm_hetero.devices import SpecError

    clash = vdevice_clash(devices)
    if clash is not None:
        raise SpecError(f"--cluster {cluster}: devices {clash}" if cluster else f"--device {clash}")


def build_options(args: argparse.Namespace):
    """The build options the command line asks for: CPU schedules (``--cpu-schedule``,
    ``--tuning-db``), the GPU archs to carry device code for (``--cuda-arch``) and whether GPU
    units capture CUDA graphs (``--cuda-graph``), how CPU 3x3 convolutions are chosen
    (``--conv3x3``)."""
    from tvm_hetero.build.multi_device import RECORDS_FILE, BuildOptions

    if args.tuning_db and not (Path(args.tuning_db) / RECORDS_FILE).is_file():
        raise ValueError(
            f"--tuning-db {args.tuning_db}: no {RECORDS_FILE} there (tune into it first)"
        )
    archs = tuple(getattr(args, "cuda_arch", None) or ())
    graph = getattr(args, "cuda_graph", True)
    conv3x3 = getattr(args, "conv3x3", "measure")
    return BuildOptions(
        args.cpu_schedule, args.tuning_db, cuda_archs=archs, cuda_graph=graph, conv3x3=conv3x3
    )


def check_offline(args: argparse.Namespace) -> None:
    """Refuse ``--offline`` for a strategy that cannot plan offline, before any work."""
    if not getattr(args, "offline", None):
        return
    from tvm_hetero.strategies.registry import strategies

    able = [name for name, s in strategies().items() if s.offline]
    if getattr(args, "strategy", None) not in able:
        raise ValueError(
            f"--offline {args.offline!r}: only --strategy {', '.join(able[:-1])} or {able[-1]} "
            f"plan for offline devices, not {args.strategy or 'a --place or --plan compile'}"
        )


def settings_from_args(args: argparse.Namespace, strategy: Any = None) -> dict[str, Any]:
    """What ``strategy``'s ``plan`` reads (every strategy's, when None), from the command's
    flags: the settings by name, with the build options and the cluster (``--cluster``) read
    and ``--offline``'s folder checked writable."""
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.optimize.search import settings_names

    names = settings_names() if strategy is None else set(vars(strategy.settings()))
    given = {k: v for k, v in vars(args).items() if k in names}
    given["options"] = build_options(args)
    cluster = getattr(args, "cluster", None)
    given["cluster"] = ClusterSpec.load(cluster) if cluster else None
    if getattr(args, "offline", None):
        given["offline"] = writable_folder(args.offline, "--offline")
    return given


class BarProgress(Progress):
    """A strategy's :class:`~tvm_hetero.strategies.base.Progress` on the console: one bar
    whose description follows the work, and lines printed above it."""

    def __init__(self, bar: Any) -> None:
        self.bar, self.task = bar, bar.add_task("starting", total=None)

    def step(self, what: str, done: int, total: int | None) -> None:
        self.bar.update(self.task, description=what, completed=done, total=total)

    def say(self, text: str) -> None:
        self.bar.console.print(text)


def progress_bar():
    """A progress bar (description, bar, done/total, elapsed) on the shared console."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    return Progress(*columns, console=console())


def check_memory(what: str, nbytes: int) -> None:
    """Refuse work that would hold more than this machine has free, naming ``what``."""
    import psutil

    free = psutil.virtual_memory().available
    if nbytes > free:
        raise ValueError(
            f"{what} would hold {nbytes / 2**30:,.1f} GiB; this machine has "
            f"{free / 2**30:,.1f} GiB free"
        )


def writable_folder(path: str, flag: str) -> str:
    """Check before any long work that ``path`` is a folder, or can be made one (it is made),
    and that a file can be written in it."""
    import os

    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{flag} {path!r}: is a file; give a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag} {path!r}: cannot create it ({err.strerror})") from None
    _probe(path, flag, path)
    return path


def writable_path(path: str, flag: str) -> str:
    """Check before any long work that ``path`` can be written: not a folder, its folder exists
    or can be created, a file can be made there (a probe, made and removed), and the file
    itself, if it exists, may be written."""
    import os

    if os.path.isdir(path):
        raise ValueError(f"{flag} {path!r}: is a folder; give a file name")
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag} {path!r}: cannot create its folder ({err.strerror})") from None
    _probe(folder, flag, path)
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path!r}: the file is read-only")
    return path


def _probe(folder: str, flag: str, path: str) -> None:
    """Make and remove a file in ``folder``: the write a command ends with, tried first."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tvm-hetero-probe-"):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {path!r}: cannot write in {folder!r} ({err.strerror})") from None


def write_plan(args: argparse.Namespace, plan, model, then: str = "") -> None:
    """With ``-o``: save ``plan`` for ``model`` and say how to deploy it (``then``: what
    follows the compile command, e.g. how to run it)."""
    if not args.output:
        return
    from tvm_hetero.api import model_id
    from tvm_hetero.plan.registry import save_plan

    save_plan(plan, model_id(model), args.output)
    cluster = f" --cluster {args.cluster}" if getattr(args, "cluster", None) else ""
    console().print(
        f"wrote {args.output} (deploy: tvm-hetero compile {args.model} --plan {args.output}"
        f"{cluster}{then})"
    )


def progress_of(bar, label: str):
    """A ``progress(what, done, total)`` callback that drives a new task of ``bar``
    (:func:`progress_bar`), starting as ``label``."""
    task = bar.add_task(label, total=None)
    return lambda what, done, total: bar.update(task, description=what, completed=done, total=total)
