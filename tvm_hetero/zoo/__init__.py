"""Model zoo in ``relax.frontend.nn`` with deterministic random weights."""

from tvm_hetero.zoo.registry import ZOO, UnknownModelError, build_config, load_zoo_model, parse_name

__all__ = ["ZOO", "UnknownModelError", "build_config", "load_zoo_model", "parse_name"]
