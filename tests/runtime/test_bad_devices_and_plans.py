import pytest

from tvm_hetero.cli.main import main


def _said(capsys) -> str:
    """What the command printed, with rich's line wrapping undone."""
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cpu@7", "device 'cpu@7': core 7 does not exist; this machine has cores 0-"),
        ("cpu@1-0", "the range 1-0 is empty"),
        ("cpu@x", "write cpu@N or cpu@A-B"),
    ],
)
def test_unknown_cores_are_refused_with_what_is_allowed(capsys, tmp_path, device, message):
    rc = main(["compile", "mlp:tiny", "--device", device, "-o", str(tmp_path / "m.tar")])
    assert rc == 2
    assert message in _said(capsys)
    assert not (tmp_path / "m.tar").exists()


def test_overlapping_core_sets_are_refused(capsys, tmp_path):
    rc = main(["compile", "mlp:tiny", "--device", "cpu@0-1", "--device", "cpu@1",
               "-o", str(tmp_path / "m.tar")])  # fmt: skip
    assert rc == 2
    assert "devices 'cpu@0-1' and 'cpu@1' both use core 1" in _said(capsys)


def test_a_plan_for_another_model_is_refused(capsys, tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["plan", "mlp:tiny", "--strategy", "als", "--device", "cpu@0", "--device",
                 "cpu@1", "--no-confirm", "-o", str(plan)]) == 0  # fmt: skip
    capsys.readouterr()
    rc = main(["compile", "lstm:tiny", "--device", "cpu@0", "--device", "cpu@1", "--plan",
               str(plan), "-o", str(tmp_path / "m.tar")])  # fmt: skip
    out = _said(capsys)
    assert rc == 2
    assert "was made for model 'mlp:tiny#" in out and "not 'lstm:tiny#" in out


def test_compile_strategy_exists_for_every_plan_strategy(capsys, tmp_path):
    rc = main(["compile", "mlp:tiny", "--strategy", "als", "--device", "cpu@0", "--device",
               "cpu@1", "--no-confirm", "-o", str(tmp_path / "m.tar"), "--check"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "max |multi-device - single-device| = 0" in out
