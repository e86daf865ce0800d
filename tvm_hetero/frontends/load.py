"""One loader for every model source: zoo, ONNX, torch.export, ``relax.frontend.nn``, TVMScript."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tvm

from tvm_hetero.frontends.model import InputSpec, Model
from tvm_hetero.ir.attrs import ENTRY_FUNC
from tvm_hetero.ir.bindings import iter_bindings
from tvm_hetero.ir.index_bounds import index_bounds
from tvm_hetero.ir.recurrent import RECURRENT_FORMS
from tvm_hetero.ir.types import tensor_infos
from tvm_hetero.runtime.memory import give_back_freed_memory
from tvm_hetero.runtime.native_noise import without_native_lines

SUFFIXES = {".onnx": "ONNX", ".pt2": "torch.export program", ".py": "TVMScript"}


class ModelLoadError(ValueError):
    """A model source that cannot be loaded."""


class UnsupportedOperatorError(ModelLoadError):
    """A model with an operator its frontend cannot convert."""


def load_model(
    source: Any,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    spec: Mapping[str, tuple[Sequence[int], str]] | None = None,
    example_args: tuple | None = None,
    name: str | None = None,
    recurrent: str = "loop",
    **overrides: Any,
) -> Model:
    """Load a model into a :class:`Model` whose ``main`` takes only data inputs.

    Parameters
    ----------
    source
        A zoo name (``bert-base``, ``resnet50:tiny``), a path to an ``.onnx`` file, a ``.pt2``
        file saved by ``torch.export.save``, or a TVMScript ``.py`` file; or an ``IRModule``, a
        ``relax.frontend.nn.Module`` (give ``spec``), a ``torch.export.ExportedProgram`` or a
        ``torch.nn.Module`` (give ``example_args``).
    shapes : Mapping[str, Sequence[int]], optional
        ONNX input shapes, for models with symbolic dimensions.
    spec : Mapping[str, tuple[shape, dtype]], optional
        Inputs of an ``nn.Module``'s ``forward``.
    example_args : tuple, optional
        Example inputs to export a ``torch.nn.Module``.
    name : str, optional
        The model's name (plans, artifacts and tables show it); default: the zoo name, the
        file's stem or the source's type.
    recurrent : str
        ``loop`` (default): an ONNX ``LSTM`` / ``GRU`` / ``RNN`` direction, or a zoo model's
        recurrent layer, becomes one loop kernel (:mod:`tvm_hetero.ir.recurrent`);
        ``unrolled``: a kernel per step and gate, for a strategy that cuts inside the
        sequence. (A zoo model's ``recurrent`` setting says the same.)
    **overrides
        Zoo settings (``batch=16``); refused for any other source.
    """
    if recurrent not in RECURRENT_FORMS:
        raise ModelLoadError(
            f"load_model: recurrent={recurrent!r} is not one of {', '.join(RECURRENT_FORMS)}"
        )
    model = _load(source, shapes, spec, example_args, overrides, recurrent == "loop")
    give_back_freed_memory()  # the importers' copies of the weights, freed
    return dataclasses.replace(model, name=name) if name else model


def _load(source: Any, shapes, spec, example_args, overrides: dict, loops: bool) -> Model:
    if overrides and not (isinstance(source, str | Path) and Path(source).suffix not in SUFFIXES):
        what = repr(str(source)) if isinstance(source, str | Path) else type(source).__name__
        raise ModelLoadError(
            f"load_model: settings {sorted(overrides)} apply to zoo models only, not to {what}"
        )
    if isinstance(source, Model):
        return source
    if isinstance(source, tvm.IRModule):
        return from_irmodule(source, "irmodule", "irmodule")
    if isinstance(source, str | Path):
        return _load_path(source, shapes, overrides, loops)
    from tvm.relax.frontend import nn

    if isinstance(source, nn.Module):
        if spec is None:
            raise ModelLoadError("load_model: an nn.Module needs spec={name: (shape, dtype)}")
        from tvm_hetero.zoo.export import export_nn

        inputs = [InputSpec(k, tuple(s), d) for k, (s, d) in spec.items()]
        name = type(source).__name__
        return export_nn(source, inputs, name=name, source=f"nn:{name}", seed_key=name)
    torch = sys.modules.get("torch")  # only a torch object can need torch: do not import it
    if torch is not None and isinstance(source, torch.nn.Module | torch.export.ExportedProgram):
        return _from_torch(source, example_args)
    raise ModelLoadError(f"load_model: cannot load a {type(source).__name__}")


def from_irmodule(mod: tvm.IRModule, name: str, source: str) -> Model:
    """Wrap an IRModule with entry ``main``; inputs are its first ``num_input`` parameters.
    Computations of empty tensors become constants (:class:`EmptyTensorsAsConstants`), as do
    convolution weights computed from constants (:class:`FoldConstantWeights`),
    convolution taps that read padding alone are dropped (:class:`CropConvolutionTaps`), and
    dilated convolutions whose taps mostly read padding are computed tap by tap
    (:class:`ConvolutionTapsByRegion`)."""
    from tvm_hetero.passes.convolution_taps_by_region import ConvolutionTapsByRegion
    from tvm_hetero.passes.crop_convolution_taps import CropConvolutionTaps
    from tvm_hetero.passes.empty_tensors_as_constants import EmptyTensorsAsConstants
    from tvm_hetero.passes.fold_constant_weights import FoldConstantWeights

    names = [gv.name_hint for gv in mod.get_global_vars()]
    if ENTRY_FUNC not in names:
        raise ModelLoadError(f"{source}: module has no {ENTRY_FUNC!r} function; functions: {names}")
    mod = FoldConstantWeights()(EmptyTensorsAsConstants()(mod))
    mod = ConvolutionTapsByRegion()(CropConvolutionTaps()(mod))
    func = mod[ENTRY_FUNC]
    n = func.attrs.get("num_input") if func.attrs else None
    params = list(func.params)[: len(func.params) if n is None else int(n)]
    rows = index_bounds(func)  # ids into a table: checked before each run, negatives allowed
    inputs = []
    for p in params:
        infos = tensor_infos(p.ty)
        if len(infos) != 1 or infos[0].shape is None:
            raise ModelLoadError(f"{source}: input {p.name!r} is not a tensor of known rank")
        n_rows = rows.get(str(p.name))
        low = None if n_rows is None else -n_rows
        inputs.append(InputSpec(str(p.name), infos[0].shape, infos[0].dtype, n_rows, low))
    return Model(name=name, mod=mod.clone(), inputs=tuple(inputs), source=source)


def _load_path(source: str | Path, shapes: Mapping | None, overrides: dict, loops: bool) -> Model:
    path = Path(source)
    if path.suffix in SUFFIXES:
        if not path.is_file():
            raise ModelLoadError(f"model file {str(path)!r} does not exist")
        if path.suffix == ".onnx":
            return _from_onnx(path, shapes, loops)
        return {".pt2": _from_pt2, ".py": _from_tvmscript}[path.suffix](path, shapes)
    if path.exists():
        raise ModelLoadError(
            f"cannot tell the format of {str(path)!r}; use one of {', '.join(SUFFIXES)}"
        )
    from tvm_hetero.zoo import load_zoo_model
    from tvm_hetero.zoo.registry import RECURRENT, parse_name

    if not loops and parse_name(str(source))[0] in RECURRENT:
        overrides = {"recurrent": "unrolled", **overrides}
    if shapes:
        raise ModelLoadError(
            f"{source}: input shapes are for ONNX files with symbolic dimensions; a zoo model's "
            "shapes are its settings (batch=..., seq_len=...)"
        )
    return load_zoo_model(str(source), **overrides)


def _from_onnx(path: Path, shapes: Mapping | None, loops: bool = True) -> Model:
    import onnx

    try:
        proto = onnx.load(str(path))
    except Exception as err:  # onnx raises DecodeError and friends
        raise ModelLoadError(f"{path}: not a readable ONNX model: {err}") from None
    initializers = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in initializers]
    unknown = sorted(set(shapes or {}) - set(names))
    if unknown:
        raise ModelLoadError(
            f"{path}: shapes given for {unknown}, which are not its inputs {names}"
        )
    _check_references(path, proto)
    _check_given_shapes(path, proto, shapes or {})
    try:
        mod = _converted(proto, shapes, loops)
    except UnsupportedOperatorError as err:
        mod = _converted_folded(proto, shapes, loops)
        if mod is None:  # the first failure is the one to tell
            raise UnsupportedOperatorError(
                f"{path}: {err}{_symbolic_hint(proto, shapes)}"
            ) from None
    if _unshaped_values(mod):  # what no kernel can be built for: try the graph folded
        simpler = _converted_folded(proto, shapes, loops)
        if simpler is not None and not _unshaped_values(simpler):
            mod = simpler
    return from_irmodule(mod, path.stem, f"onnx:{path}")


def _unshaped_values(mod: tvm.IRModule) -> bool:
    """Whether a tensor ``main`` computes has a known rank but no shape, not even a symbolic
    one: the frontend's slice by bounds it computes from shapes at run time
    (``dynamic_strided_slice``), whose kernels Relax cannot legalize ("emit_te now only
    supports Tensor that has ShapeExpr shape"). transformers' Mixtral with its batched
    experts cuts each expert's gate and up projections so, by halves of a shape."""
    from tvm import relax

    return any(
        isinstance(binding.var.ty, relax.TensorType) and binding.var.ty.shape is None
        for _, _, binding in iter_bindings(mod[ENTRY_FUNC])
    )


def _converted_folded(proto: Any, shapes: Mapping | None, loops: bool) -> tvm.IRModule | None:
    """``proto`` with its constant shape arithmetic evaluated (:func:`onnx_fold.folded`),
    through :func:`_converted`; None where nothing folds or it fails again."""
    from tvm_hetero.frontends.onnx_fold import folded

    simpler = folded(proto, shapes)
    if simpler is None:
        return None
    try:
        return _converted(simpler, shapes, loops)
    except UnsupportedOperatorError:
        return None


FRONTEND_ERRORS = (tvm.error.OpError, tvm.error.InternalError, ValueError, TypeError,
                   AssertionError, AttributeError, KeyError, IndexError,
                   NotImplementedError)  # fmt: skip
"""What TVM's ONNX frontend raises on a graph it cannot convert: ``OpNotImplemented`` and
``OpAttributeUnImplemented`` (``OpError``), a converter's own checks (``ValueError``,
``assert``), Relax's type inference (``ValueError``), an internal check of TVM's, a converter
that reads a symbolic dimension's ``value`` (``AttributeError``)."""


def _symbolic_hint(proto: Any, shapes: Mapping | None) -> str:
    """What to try where ``proto`` has symbolic input dimensions no size was given for: give
    them one, so that its shape arithmetic can be evaluated before import."""
    symbolic = (
        value for value in proto.graph.input if value.name not in (shapes or {})
        and any(not d.HasField("dim_value") for d in value.type.tensor_type.shape.dim)
    )  # fmt: skip
    value = next(symbolic, None)
    if value is None:
        return ""
    name = value.name
    dims = value.type.tensor_type.shape.dim
    shape = "x".join(d.dim_param or str(d.dim_value or "?") for d in dims)
    return (
        f"; its input {name} has symbolic dimensions ({shape}): given sizes "
        f"(--input-shape {name}:{shape} with sizes) its shape arithmetic is evaluated first"
    )


def _converted(proto: Any, shapes: Mapping | None, loops: bool) -> tvm.IRModule:
    """``proto`` through TVM's ONNX frontend with :func:`onnx_converters`; a failure as
    :class:`UnsupportedOperatorError` naming the operator it failed at (the frontend prints it
    before raising: kept quiet otherwise), without the warning TVM logs when the failed
    import's builder is freed (:data:`BUILDER_NOISE`)."""
    from tvm.relax.frontend.onnx import from_onnx

    said, failure = io.StringIO(), ""
    with without_native_lines(BUILDER_NOISE):
        try:
            with onnx_converters(loops), contextlib.redirect_stdout(said):
                return from_onnx(proto, shape_dict=dict(shapes) if shapes else None)
        except FRONTEND_ERRORS as err:
            failure = _first_line(err)
        gc.collect()  # the failed import's builder, and its warning, go here
    found = re.search(r"Error converting operator (\w+)", said.getvalue())
    raise UnsupportedOperatorError(f"{found.group(1)}: {failure}" if found else failure)


BUILDER_NOISE = "BlockBuilder destroyed with remaining blocks"
"""What TVM logs (C++, to stderr) when a builder left by a failed import is freed."""


@contextlib.contextmanager
def onnx_converters(loops: bool = True) -> Iterator[None]:
    """TVM's ONNX frontend with the operators it lacks in its table, within the ``with``: the
    recurrent layers (:mod:`~tvm_hetero.frontends.onnx_rnn`; ``loops=False`` unrolls them),
    ``Col2Im`` (:mod:`~tvm_hetero.frontends.onnx_col2im`) and ``DFT``
    (:mod:`~tvm_hetero.frontends.onnx_dft`); and ``ConstantOfShape`` of an empty shape
    (:mod:`~tvm_hetero.frontends.onnx_constant_of_shape`), ``Split`` by sizes the graph
    computes (:mod:`~tvm_hetero.frontends.onnx_split`) and an unsorted ``TopK``
    (:mod:`~tvm_hetero.frontends.onnx_topk`), which it fails on."""
    from tvm.relax.frontend.onnx import onnx_frontend

    from tvm_hetero.frontends import (
        onnx_col2im,
        onnx_constant_of_shape,
        onnx_dft,
        onnx_rnn,
        onnx_split,
        onnx_topk,
    )

    original = onnx_frontend._get_convert_map
    added = {**onnx_rnn.converters(loops), **onnx_col2im.CONVERTERS, **onnx_dft.CONVERTERS,
             **onnx_constant_of_shape.CONVERTERS, **onnx_split.CONVERTERS,
             **onnx_topk.CONVERTERS}  # fmt: skip
    onnx_frontend._get_convert_map = lambda: {**original(), **added}
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original


def _check_references(path: Path, proto: Any) -> None:
    """Every input a node of the graph reads is an input of the graph, an initializer or what a
    node makes, as ONNX Runtime checks before it runs a file (timm's Gemma 4 ViT exported by
    torch 2.11 read a clamp's bound that nothing defined: TVM's frontend failed on its name
    alone). Subgraphs (``If``, ``Loop``) may read their outer scope and are not checked."""
    graph = proto.graph
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    defined |= {name for node in graph.node for name in node.output}
    for node in graph.node:
        missing = next((n for n in node.input if n and n not in defined), None)
        if missing is not None:
            raise ModelLoadError(
                f"{path}: not a valid ONNX graph: input {missing!r} of node "
                f"{node.name or '(unnamed)'!r} ({node.op_type}) is no graph input, initializer "
                "or node's output (ONNX Runtime refuses the file too)"
            )


def _check_given_shapes(path: Path, proto: Any, shapes: Mapping) -> None:
    """A shape given for an ONNX input keeps its rank and its fixed dimensions: it names the
    symbolic ones only (a changed fixed dimension compiled a model of other weights' shapes)."""
    for value in proto.graph.input:
        if value.name not in shapes:
            continue
        dims = value.type.tensor_type.shape.dim
        given = list(shapes[value.name])
        if len(given) != len(dims):
            raise ModelLoadError(
                f"--input-shape {value.name}: {len(given)} dimensions given, the input has "
                f"{len(dims)}"
            )
        for i, (dim, size) in enumerate(zip(dims, given, strict=True)):
            if dim.HasField("dim_value") and dim.dim_value != size:
                raise ModelLoadError(
                    f"--input-shape {value.name}: dimension {i} is fixed at {dim.dim_value} in "
                    f"the model, {size} given; only symbolic dimensions take a size"
                )


def _from_pt2(path: Path, _shapes: Mapping | None) -> Model:
    torch = _import_torch()
    return _from_exported(torch.export.load(str(path)), path.stem, f"pt2:{path}")


def _from_torch(obj: Any, example_args: tuple | None) -> Model:
    torch = _import_torch()
    if isinstance(obj, torch.export.ExportedProgram):
        return _from_exported(obj, "exported_program", "torch.export")
    if isinstance(obj, torch.nn.Module):
        if example_args is None:
            raise ModelLoadError("load_model: a torch.nn.Module needs example_args=(tensor, ...)")
        name = type(obj).__name__
        return _from_exported(torch.export.export(obj.eval(), example_args), name, f"torch:{name}")
    raise ModelLoadError(f"load_model: cannot load a {type(obj).__name__}")


def _from_exported(program: Any, name: str, source: str) -> Model:
    from tvm.relax.frontend.torch import from_exported_program

    try:
        mod = from_exported_program(program, keep_params_as_input=False)
    except (AssertionError, KeyError, tvm.error.OpNotImplemented) as err:
        raise UnsupportedOperatorError(f"{source}: {_first_line(err)}") from None
    return from_irmodule(mod, name, source)


def _from_tvmscript(path: Path, _shapes: Mapping | None) -> Model:
    """A TVMScript file: printed text (``mod.script()``), or a Python file defining one IRModule."""
    try:
        mod = tvm.script.from_source(path.read_text())
    except Exception:  # from_source rejects imports: run it as the Python file it is
        mod = _import_irmodule(path)
    if not isinstance(mod, tvm.IRModule):
        raise ModelLoadError(f"{path}: TVMScript must define an IRModule (@I.ir_module)")
    return from_irmodule(mod, path.stem, f"tvmscript:{path}")


def _import_irmodule(path: Path) -> tvm.IRModule:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_tvm_hetero_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # the TVMScript parser finds the source through it
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as err:  # the user's file: any error is a load error
        raise ModelLoadError(f"{path}: not a valid TVMScript file: {_first_line(err)}") from None
    found = {k: v for k, v in vars(module).items() if isinstance(v, tvm.IRModule)}
    if len(found) != 1:
        raise ModelLoadError(
            f"{path}: TVMScript must define an IRModule (@I.ir_module); "
            f"found {sorted(found) or 'none'}"
        )
    return next(iter(found.values()))


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ModelLoadError(
            "loading PyTorch models needs torch: pip install 'tvm-hetero[torch]'"
        ) from None
    return torch


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[-1] if text else type(err).__name__
