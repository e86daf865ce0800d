"""Candidates' builds of one model, held in memory while they fit, else saved as they are made.

A search that times several builds of one model side by side (``optimize``; FlexPie's and Lee
et al.'s confirmations) held them all: on ViT-Huge (2.35 GiB of weights) FlexPie's four were
killed for memory on a 24 GiB host. A build holds about its weights again (1.05x on ViT-Large
once the allocator's freed pages are given back), and the pinned TVM never frees a library it
loaded, so a saved build cannot be loaded back into the searching process either: when the
builds would not fit, :class:`HeldBuilds` saves each to its folder and drops it, and the
search times the saved file in a process of its own
(:func:`~tvm_hetero.runtime.executor.interleaved_run_seconds` takes the path). Whether they fit
is judged before the first (by the weights) and after each held one (by the memory the system
has left), so that builds larger than their weights, a device's copy of them each, are saved.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

from tvm_hetero.build.compiled import CompiledModel
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.runtime.deployment import Deployment, retargeted
from tvm_hetero.runtime.memory import available_bytes, give_back_freed_memory

BUILD_MEMORY = 1.25
"""Memory one build holds, in its model's weights: 1.05 measured on ViT-Large, 1.1 on
ViT-Base, the rest a margin."""
MEMORY_SHARE = 0.5
"""Of the memory available when a search starts, what its builds may hold at once; the rest
is for the model, the compiler's peaks (twice the weights on ViT-Large) and the runs."""


def builds_fit(model: Model, count: int) -> bool:
    """Whether ``count`` builds of ``model`` fit in :data:`MEMORY_SHARE` of the memory available
    now (True where the system does not say)."""
    available = available_bytes()
    if available is None:
        return True
    return count * BUILD_MEMORY * model.weight_bytes() <= MEMORY_SHARE * available


class HeldBuilds:
    """Up to ``count`` builds of ``model`` by name: held (``in_memory`` True, or None and
    :func:`builds_fit`), or saved to a temporary folder and dropped. With ``in_memory`` None,
    the builds after one that leaves no room for another (:meth:`_room_for_another`, by the
    memory the system has) are saved too. The folder goes on :meth:`close` (or leaving it as
    a context), or when the object is collected."""

    def __init__(self, model: Model, count: int, in_memory: bool | None = None) -> None:
        keep = builds_fit(model, count) if in_memory is None else in_memory
        self.folder: Path | None = None
        self.builds: dict[str, CompiledModel | Path] = {}
        self.twins: set[str] = set()  # builds that share another's library (:meth:`twin`)
        self._remove: weakref.finalize | None = None
        self._start = available_bytes() if in_memory is None and keep else None
        if not keep:
            self._save_from_now()

    def _save_from_now(self) -> None:
        """Save the builds added from now on to a folder of their own."""
        self.folder = Path(tempfile.mkdtemp(prefix="tvm-hetero-builds-"))
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    def _room_for_another(self) -> bool:
        """Whether one more build, as large as those held so far took on average (the memory
        the system had when this began, less what it has now), stays within
        :data:`MEMORY_SHARE` of it. A build holds its model's weights once a device that
        computes with all of them: FlexPie's tiles over the emulated parameter server of four
        held ViT-Large's four times, and its confirmation was killed for memory at 19.5 GB on
        a 24 GiB host holding :data:`BUILD_MEMORY` times the weights a build to fit."""
        if self._start is None:
            return True
        give_back_freed_memory()
        now = available_bytes()
        if now is None:
            return True
        used = max(0, self._start - now)
        return used + used / (len(self.builds) - len(self.twins)) <= MEMORY_SHARE * self._start

    def __enter__(self) -> HeldBuilds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop every build and remove the saved ones."""
        self.builds.clear()
        if self._remove is not None:
            self._remove()

    def __contains__(self, name: str) -> bool:
        return name in self.builds

    def add(self, name: str, compiled: CompiledModel) -> Deployment | Path:
        """Hold ``compiled`` as ``name``, or save it (the caller drops its own reference);
        returns what to time: the deployment, or the saved file."""
        if self.folder is None:
            self.builds[name] = compiled
            if not self._room_for_another():
                self._save_from_now()
            return compiled.deployment
        path = compiled.deployment.save(self.folder / f"{len(self.builds)}.tar")
        self.builds[name] = path
        return path

    def twin(self, source: str, name: str, device: DeviceSpec, plan: Any) -> Deployment | Path:
        """``source``'s build, for one device, as ``name``'s on ``device`` (of the same kind
        and target: the same code), with no compile: held, the build with its device and
        ``plan`` replaced (its library shared); saved, a copy of its file with its manifest's
        (:func:`~tvm_hetero.runtime.deployment.retargeted`: ViT-Large's four devices alone on
        the emulated parameter server, saved, were compiled one by one, half a minute each).
        Returns what to time, as :meth:`add`."""
        build = self.builds[source]
        self.twins.add(name)
        if isinstance(build, CompiledModel):
            deployment = replace(build.deployment, devices=(device,), plan=plan.to_dict())
            self.builds[name] = replace(build, deployment=deployment, devices=(device,),
                                        placement=plan)  # fmt: skip
            return deployment
        out = build.with_name(f"{len(self.builds)}.tar")  # in the saved builds' folder
        self.builds[name] = retargeted(build, out, (device,), plan.to_dict())
        return self.builds[name]

    def timed(self, name: str) -> Deployment | Path:
        """What to time for ``name``: its deployment, or its saved file."""
        build = self.builds[name]
        return build.deployment if isinstance(build, CompiledModel) else build

    def compiled(self, name: str) -> CompiledModel | None:
        """``name``'s build when held; None when it was saved (compile it again to keep it)."""
        build = self.builds.get(name)
        return build if isinstance(build, CompiledModel) else None

    def dropped(self) -> None:
        """Give back the memory of builds just saved and dropped (no-op while holding)."""
        if self.folder is not None:
            give_back_freed_memory()
