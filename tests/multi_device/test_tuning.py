import numpy as np
import pytest
import tvm

from tvm_hetero import api
from tvm_hetero.build.multi_device import BuildOptions, lower
from tvm_hetero.build.tuning import cpu_kernels, seed_with_rules, tune
from tvm_hetero.plan import Placement
from tvm_hetero.schedules import kernel_choices
from tvm_hetero.zoo import load_zoo_model


@pytest.mark.slow
def test_tuned_records_are_applied_to_the_final_build(tmp_path, two_cpus):
    """A real (small) MetaSchedule run; the build then uses its records and gives the same numbers."""
    model = load_zoo_model("mlp:tiny")
    placed = api.place(model, two_cpus[:1], Placement(("cpu",)))
    kernels = cpu_kernels(placed)
    assert len(kernels) == 1  # one target: this CPU, named to LLVM
    (target,) = kernels
    assert '"mcpu"' in target
    seen = []
    summary = tune(
        placed, tmp_path, trials=4, progress=lambda done, total: seen.append((done, total))
    )
    assert summary.trials >= 1 and seen[-1] == (summary.trials, 4)
    assert summary.seeded == summary.kernels  # the rules were measured in first
    options = BuildOptions("metaschedule", str(tmp_path))
    lowered = lower(placed, options)
    tuned = [gv.name_hint for gv, f in lowered.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc) and f.attrs.get("tirx.is_scheduled")]  # fmt: skip
    assert any("matmul" in name for name in tuned)
    inputs = model.random_inputs()
    got = api.run(api.compile(model, two_cpus[:1], None, options), inputs)
    np.testing.assert_allclose(
        got[0], api.reference_outputs(model, inputs, two_cpus[0])[0], rtol=1e-5, atol=1e-5
    )


def test_tune_rejects_zero_trials(tmp_path, two_cpus):
    placed = api.place(load_zoo_model("mlp:tiny"), two_cpus[:1], Placement(("cpu",)))
    with pytest.raises(ValueError, match="trials must be >= 1, got 0"):
        tune(placed, tmp_path, trials=0)


def test_rules_seed_the_database_and_are_the_floor(tmp_path, two_cpus):
    """Seeding measures each kernel's rule schedule into the database; a build then reports
    every kernel as tuned (the rules' record is the best so far) and computes the same numbers."""
    model = load_zoo_model("mlp:tiny")
    placed = api.place(model, two_cpus[:1], Placement(("cpu",)))
    groups = cpu_kernels(placed)
    n_kernels = sum(len(k) for k in groups.values())
    assert seed_with_rules(groups, tmp_path) == n_kernels
    assert seed_with_rules(groups, tmp_path) == 0  # already there
    options = BuildOptions("metaschedule", str(tmp_path))
    assert {c.label for c in kernel_choices(lower(placed, options))} == {"tuned"}
    inputs = model.random_inputs()
    got = api.run(api.compile(model, two_cpus[:1], None, options), inputs)
    np.testing.assert_allclose(
        got[0], api.reference_outputs(model, inputs, two_cpus[0])[0], rtol=1e-5, atol=1e-5
    )
