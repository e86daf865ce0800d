"""What a .tar's recipe holds, and what run --replan agrees to run."""

import argparse
import json
import tarfile

import pytest

from tvm_hetero.cli import cmd_run
from tvm_hetero.cli.cmd_compile import relative_argv
from tvm_hetero.cli.main import main
from tvm_hetero.errors import RunError
from tvm_hetero.runtime.deployment import load


def _manifest(path):
    with tarfile.open(path) as tar:
        return json.load(tar.extractfile("manifest.json"))


def test_recipe_holds_no_absolute_path(tmp_path):
    model = tmp_path / "models" / "m.py"
    model.parent.mkdir()
    model.write_text("x = 1\n")
    argv = ["compile", str(model), "--device", "cpu", "-o", "out/m.tar"]
    assert relative_argv(argv, tmp_path / "out") == [
        "compile", "../models/m.py", "--device", "cpu", "-o", "out/m.tar",
    ]  # fmt: skip


def test_compiled_tar_carries_a_relative_recipe(tmp_path):
    out = tmp_path / "m.tar"
    assert main(["compile", "mlp:tiny", "--device", "cpu", "-o", str(out)]) == 0
    recipe = _manifest(out)["recipe"]
    assert "cwd" not in recipe
    assert not any(item.startswith("/") for item in recipe["argv"])
    assert str(tmp_path) not in json.dumps(_manifest(out))


def _with_recipe(tmp_path, recipe):
    out = tmp_path / "pack" / "m.tar"
    out.parent.mkdir()
    assert main(["compile", "mlp:tiny", "--device", "cpu", "-o", str(out)]) == 0
    deployment = load(out, tmp_path / "lib")
    return out, deployment.__class__(**{**deployment.__dict__, "recipe": recipe})


@pytest.mark.parametrize(
    ("recipe", "refusal"),
    [
        ({"argv": ["compile", "../evil_model.py", "-o", "x.tar"]}, "outside the .tar's folder"),
        ({"argv": ["compile", "mlp:tiny", "-o", "x.tar"], "cwd": "/tmp"}, "--trust-recipe"),
    ],
)
def test_replan_refuses_a_recipe_that_reaches_outside_its_folder(tmp_path, recipe, refusal):
    (tmp_path / "evil_model.py").write_text("raise SystemExit('ran')\n")
    path, deployment = _with_recipe(tmp_path, recipe)
    args = argparse.Namespace(file=str(path), trust_recipe=False)
    (tmp_path / "work").mkdir()
    with pytest.raises(RunError, match=refusal):
        cmd_run._replan(deployment, "cpu", None, str(tmp_path / "work"), args)
