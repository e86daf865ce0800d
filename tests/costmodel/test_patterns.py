"""EOP's performance patterns: the right one is picked, predictions and persistence."""

import numpy as np
import pytest

from tvm_hetero.costmodel.patterns import (
    PatternKind,
    PatternStore,
    fit_pattern,
    sample_sizes,
)


def _noisy(values, seed=0, noise=0.02):
    rng = np.random.default_rng(seed)
    return [v * (1 + noise * rng.standard_normal()) for v in values]


def test_linear_data_gives_the_linear_pattern():
    sizes = sample_sizes(64)
    pattern = fit_pattern(sizes, _noisy([1e-4 + 2e-5 * s for s in sizes]))
    assert pattern.kind is PatternKind.LINEAR
    assert pattern.predict(32) == pytest.approx(1e-4 + 2e-5 * 32, rel=0.05)
    assert pattern.error < 0.05


def test_steps_give_the_staircase_with_their_width():
    sizes = list(range(1, 65, 3))
    times = _noisy([1e-4 + 5e-4 * np.ceil(s / 16) for s in sizes], noise=0.01)
    pattern = fit_pattern(sizes, times)
    assert pattern.kind is PatternKind.STAIRCASE
    assert pattern.params[2] == 16
    assert pattern.predict(17) == pytest.approx(1e-4 + 5e-4 * 2, rel=0.05)
    assert pattern.errors["staircase"] < pattern.errors["linear"]


def test_flat_data_gives_the_constant_pattern():
    sizes = sample_sizes(100)
    pattern = fit_pattern(sizes, _noisy([3e-5] * len(sizes), noise=0.03))
    assert pattern.kind is PatternKind.CONSTANT
    assert pattern.predict(7) == pytest.approx(3e-5, rel=0.05)
    assert pattern.predict(0) == 0.0


def test_bad_samples_are_rejected():
    with pytest.raises(ValueError, match="at least 3 distinct sizes"):
        fit_pattern([1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_pattern([1, 2, 3], [1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="extent"):
        sample_sizes(0)


def test_store_roundtrip(tmp_path):
    sizes = sample_sizes(16)
    pattern = fit_pattern(sizes, [1e-5 * s for s in sizes])
    store = PatternStore(tmp_path / "patterns.json")
    key = PatternStore.key("wl", "llvm", "rules:v2", "M")
    store.put(key, pattern, sizes, [1e-5 * s for s in sizes])
    store.save()
    again = PatternStore(tmp_path / "patterns.json")
    assert again.get(key) == pattern
    assert again.get("missing") is None
    assert again.entries[key]["sizes"] == sizes


def test_fits_never_have_a_negative_intercept():
    """A negative intercept would predict two halves cheaper than the whole on one device."""
    sizes = [4, 8, 12, 16]
    pattern = fit_pattern(sizes, [1e-6, 5e-6, 9e-6, 13e-6])  # t = 1e-6 * x - 3e-6
    assert pattern.params[-1 if pattern.kind == "linear" else 1] >= 0
    assert 2 * pattern.predict(8) >= pattern.predict(16) * 0.999


@pytest.mark.whole_machine  # a sweep timed beside another test worker held out at 14x
def test_patterns_fit_this_cpus_measured_sweep_and_predict_held_out_sizes(tmp_path):
    """A matmul swept along its rows on this CPU: fitted on every other size, the pattern
    predicts the sizes it never saw (the figure the EOP benchmark reports per model)."""
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.ir.workloads import Dim
    from tvm_hetero.profiling.db import ProfileDB
    from tvm_hetero.profiling.profiler import Profiler
    from tvm_hetero.runtime.measure import MeasureConfig
    from tvm_hetero.zoo import load_zoo_model

    model = load_zoo_model("mlp:tiny", batch=64, sizes=[128, 128, 8])
    sizes = list(range(8, 72, 8))
    for attempt in range(2):  # a second sweep, fresh, if the first held out past the bound
        profiler = Profiler(ProfileDB(tmp_path / f"p{attempt}.jsonl"), config=MeasureConfig(15, 2))
        swept = profiler.sweep(model.mod, "matmul", Dim("M", ((0, 0),)), sizes, cpu_device())
        # the fastest of 15 samples: other work on this shared machine only ever adds time
        # (with medians of 3 samples, a sweep timed beside another job held out at 0.13-8.5x;
        # with the fastest of 5, at up to 655x once; with 15, at 0.52 once in make test)
        seconds = [min(r.samples_s) for _, r in swept]
        pattern = fit_pattern(sizes[::2], seconds[::2])
        held_out = [
            abs(pattern.predict(s) - t) / t
            for s, t in zip(sizes[1::2], seconds[1::2], strict=True)
        ]  # fmt: skip
        if np.median(held_out) < 0.5:
            break
    assert pattern.kind in PatternKind and np.isfinite(pattern.error)
    predicted = [pattern.predict(s) for s in sizes[1::2]]
    assert all(np.isfinite(held_out)) and min(predicted) > 0
    assert np.median(held_out) < 0.5, held_out  # loose: this machine is shared; a wrong fit is >1


def test_store_fits_each_sample_set_once(tmp_path):
    sizes = sample_sizes(16)
    store = PatternStore(tmp_path / "patterns.json")
    first = store.fit("k", sizes, [1e-5 * s for s in sizes])
    store.entries["k"]["pattern"]["error"] = -1.0  # marks the stored fit
    assert store.fit("k", sizes, [1e-5 * s for s in sizes]).error == -1.0  # reused, not refitted
    refit = store.fit("k", sizes, [2e-5 * s for s in sizes])  # new samples: a new fit
    assert refit.error >= 0 and refit.params != first.params
    assert not (tmp_path / "patterns.json").exists()  # written by save() only
    store.save()
    assert PatternStore(tmp_path / "patterns.json").get("k") == refit
