"""Every zoo model, scheduled by the CPU rules, computes what TVM's default build computes."""

import numpy as np
import pytest

from tvm_hetero import api
from tvm_hetero.build.multi_device import BuildOptions, lower
from tvm_hetero.devices import cpu_device
from tvm_hetero.schedules import kernel_choices
from tvm_hetero.zoo import load_zoo_model
from tvm_hetero.zoo.registry import ZOO

_SLOW = {
    "mt-dnn", "siamese-lstm", "vit-large", "vit-huge", "bert-base", "resnet50", "wide-deep", "gru",
    "gpt2",
}  # fmt: skip
"""5-18 s each (make test-slow; they kept make test over 15 minutes): the same kernels as
lstm, mlp, vit-base, bert-small and resnet18 at other sizes (mt-dnn: a BERT-base-shaped encoder
and 10 LSTM heads; wide-deep: ResNet-18, an LSTM and dense layers; gru: lstm's kernels)."""


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in sorted(ZOO)]
)
def test_rules_match_default_build(name):
    model = load_zoo_model(f"{name}:tiny")
    cpu = cpu_device()
    inputs = model.random_inputs()
    compiled = api.compile(model, [cpu], options=BuildOptions("rules"))
    got = api.run(compiled, inputs)
    want = api.reference_outputs(model, inputs, cpu)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    labels = {c.label for c in kernel_choices(lower(compiled.placed, BuildOptions("rules")))}
    assert labels and all(label.startswith("rule:") for label in labels), labels
