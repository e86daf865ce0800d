"""A compiled model's manifest, checked field by field before anything in it is trusted.

A ``.tar`` may have been edited, damaged or crafted: every field a run reads is checked here,
so a bad one is an :class:`ArtifactError` naming the field (``manifest.steps[3].device``) and
what it must be, never a ``KeyError`` deep in the runtime or a library called with the wrong
shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STEP_KINDS = ("unit", "copy", "item")


class ArtifactError(ValueError):
    """A file that is not a tvm-hetero compiled model."""


def check_manifest(data: dict[str, Any]) -> None:
    """Raise :class:`ArtifactError` naming the first field of ``data`` a deployment cannot use.

    Checked: the model's name; the devices (a list: each is checked by ``DeviceSpec`` itself);
    each input's name, shape (sizes ``>= 0`` or a symbolic name), dtype and id bounds; each
    step's kind, name (new), inputs (values defined before it), device (one of the devices),
    function, tuple index and byte count; the outputs (defined values); ``plan`` and ``recipe``
    objects.
    """
    for key, kind in (("model", str), ("devices", list), ("inputs", list), ("steps", list),
                      ("outputs", list)):  # fmt: skip
        _need(isinstance(data.get(key), kind), key, f"must be a {_NAMES[kind]}")
    for key in ("plan", "recipe"):
        _need(isinstance(data.get(key, {}), dict), key, "must be an object")
    defined = {_input(spec, f"inputs[{i}]") for i, spec in enumerate(data["inputs"])}
    for i, step in enumerate(data["steps"]):
        defined.add(_step(step, f"steps[{i}]", defined, len(data["devices"])))
    for i, name in enumerate(data["outputs"]):
        _need(
            isinstance(name, str) and name in defined,
            f"outputs[{i}]",
            f"{name!r} is no input or step of the model",
        )


_NAMES = {str: "string", list: "list"}


def _need(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise ArtifactError(f"manifest.{where}: {message}")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _input(spec: object, where: str) -> str:
    """Check one input; its name."""
    _need(isinstance(spec, dict), where, "must be an object")
    assert isinstance(spec, dict)
    _need(isinstance(spec.get("name"), str), f"{where}.name", "must be a string")
    shape = spec.get("shape")
    _need(
        isinstance(shape, list)
        and all((_whole(d) and d >= 0) or (isinstance(d, str) and d) for d in shape),
        f"{where}.shape",
        f"must be a list of sizes >= 0 or dimension names, got {shape!r}",
    )
    try:  # np.dtype(None) is float64: a name is required
        dtype = np.dtype(spec["dtype"]) if isinstance(spec.get("dtype"), str) else None
    except (TypeError, ValueError):
        dtype = None
    _need(dtype is not None and dtype.kind in "biuf", f"{where}.dtype",
          f"must be a number type, got {spec.get('dtype')!r}")  # fmt: skip
    for key in ("high", "low"):
        value = spec.get(key)
        _need(value is None or _whole(value), f"{where}.{key}", "must be a whole number")
    return spec["name"]


def _step(step: object, where: str, defined: set[str], devices: int) -> str:
    """Check one step against the values defined before it; its name."""
    _need(isinstance(step, dict), where, "must be an object")
    assert isinstance(step, dict)
    kind = step.get("kind")
    _need(kind in STEP_KINDS, f"{where}.kind", f"must be one of {list(STEP_KINDS)}, got {kind!r}")
    name = step.get("name")
    _need(isinstance(name, str) and name not in defined, f"{where}.name",
          f"must be a new value's name, got {name!r}")  # fmt: skip
    inputs = step.get("inputs")
    _need(isinstance(inputs, list) and all(isinstance(v, str) for v in inputs), f"{where}.inputs",
          "must be a list of value names")  # fmt: skip
    for value in inputs:
        _need(value in defined, f"{where}.inputs", f"{value!r} is not defined before this step")
    _need(kind == "unit" or len(inputs) == 1, f"{where}.inputs", f"a {kind} takes one value")
    if kind != "item":
        device = step.get("device")
        _need(_whole(device) and 0 <= device < devices, f"{where}.device",
              f"must be a device index in [0, {devices}), got {device!r}")  # fmt: skip
    if kind == "unit":
        _need(isinstance(step.get("function"), str), f"{where}.function", "must be a string")
    if kind == "item":
        index = step.get("index")
        _need(_whole(index) and index >= 0, f"{where}.index", f"must be >= 0, got {index!r}")
    nbytes = step.get("nbytes", 0)
    _need(_whole(nbytes) and nbytes >= 0, f"{where}.nbytes", f"must be >= 0, got {nbytes!r}")
    return name
