import numpy as np
import pytest
import tvm

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.zoo import ZOO, UnknownModelError, build_config, load_zoo_model


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in ("vit-large", "vit-huge") else n
        for n in sorted(ZOO)
    ],
)  # the two larger ViTs: 4 s each, vit-base's blocks (make test-slow)
def test_tiny_models_run_and_are_deterministic(name, two_cpus):
    a, b = load_zoo_model(f"{name}:tiny"), load_zoo_model(f"{name}:tiny")
    tvm.ir.assert_structural_equal(a.mod, b.mod)  # same weights (constants compare by value)
    for out in api.reference_outputs(a, a.random_inputs(), two_cpus[0]):
        assert np.isfinite(out).all() and out.size
    assert a.source == f"zoo:{name}:tiny"
    assert [i.name for i in a.inputs] == [p.name for p in a.mod["main"].params]


def test_paper_presets_follow_the_papers():
    assert build_config("lstm") == dict(
        batch=16, seq_len=1, input_size=80, hidden=64, num_layers=2, recurrent="loop"
    )
    bert = build_config("bert-base")
    assert (bert["hidden"], bert["layers"], bert["heads"], bert["ffn"]) == (768, 12, 12, 3072)
    vit_h = build_config("vit-huge")
    assert (vit_h["hidden"], vit_h["layers"], vit_h["patch"]) == (1280, 32, 14)
    assert build_config("mt-dnn")["tags"] == [29, 3, 3, 7, 9, 11, 9, 25, 7, 13]
    assert build_config("siamese-lstm")["seq_len"] == 64
    assert build_config("wide-deep")["wide"] == 363


def test_overrides_and_bad_names():
    model = load_zoo_model("lstm:tiny", batch=5)
    assert model.inputs[0].shape[0] == 5
    with pytest.raises(UnknownModelError, match="has no preset 'huge'"):
        load_zoo_model("lstm:huge")
    with pytest.raises(UnknownModelError, match="has no setting colour"):
        load_zoo_model("lstm:tiny", colour=1)
    with pytest.raises(UnknownModelError, match="unknown model 'resnet1000'"):
        load_zoo_model("resnet1000")


def test_gpt2_is_causal(two_cpus):
    """Changing a later token must not change earlier logits."""
    model = load_zoo_model("gpt2:tiny")
    ids = model.random_inputs()["ids"]
    changed = ids.copy()
    changed[0, -1] = (changed[0, -1] + 1) % 64
    a = api.reference_outputs(model, {"ids": ids}, two_cpus[0])[0]
    b = api.reference_outputs(model, {"ids": changed}, two_cpus[0])[0]
    np.testing.assert_allclose(a[0, :-1], b[0, :-1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[0, -1], b[0, -1])


def test_recurrent_layers_as_loops_or_unrolled_compute_the_same():
    loop = load_zoo_model("siamese-lstm:tiny")
    unrolled = load_zoo_model("siamese-lstm:tiny", recurrent="unrolled")
    assert "call_tir" in loop.mod["main"].script()
    assert "call_tir" not in unrolled.mod["main"].script()
    rng = np.random.default_rng(0)
    feeds = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in loop.inputs}
    got, want = (api.reference_outputs(m, feeds, cpu_device()) for m in (loop, unrolled))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(UnknownModelError, match="recurrent='fused' is not one of loop"):
        load_zoo_model("lstm:tiny", recurrent="fused")
