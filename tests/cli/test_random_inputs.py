"""Properties over every flag and file reader: any value is taken or refused in one line."""

import argparse
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_hetero.cli.cmd_run import _inputs
from tvm_hetero.cli.main import build_parser, main
from tvm_hetero.costmodel.estimators import Estimator
from tvm_hetero.profiling.db import ProfileDB, check_profile_db
from tvm_hetero.runtime.inputs import InputSpec


def _typed_flags() -> list[tuple[str, str]]:
    """``(command, flag)`` for every option whose value the parser converts or chooses from."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [
        (command, action.option_strings[-1])
        for command, sub in commands.choices.items()
        for action in sub._actions
        if action.option_strings and action.nargs != 0 and (action.type or action.choices)
    ]


TYPED = _typed_flags()


def test_the_flags_are_found():
    assert len(TYPED) > 50 and ("run", "--repeat") in TYPED and ("worker", "--port") in TYPED


@given(st.sampled_from(TYPED), st.text(min_size=1, max_size=16))
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_text_as_any_typed_flag_is_taken_or_refused_naming_the_flag(capsys, flag, value):
    """Property: a value is converted (``--help`` then exits 0) or refused by the parser with
    exit 2 and a line naming the flag; never a traceback."""
    command, option = flag
    with pytest.raises(SystemExit) as exit_:
        main([command, f"{option}={value}", "--help"])
    err = capsys.readouterr().err
    assert exit_.value.code in (0, 2)
    if exit_.value.code == 2:
        assert f"argument {option}" in err or option in err, err


@given(st.binary(max_size=300))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_bytes_as_a_profile_database_are_read_or_refused_by_line(tmp_path, data):
    """Property: a damaged line is skipped and named with its file and line; a file that is no
    database at all is refused as a whole, before any work."""
    path = tmp_path / "db.jsonl"
    path.write_bytes(data)
    try:
        check_profile_db(path)
        problems = ProfileDB(path).problems
    except ValueError as err:
        problems = [f"{path}: {err}"] if str(path) in str(err) else [str(err)]
    assert all(p.startswith(f"{path}:") for p in problems), problems


SPECS = [InputSpec("x", (2, 3), "float32"), InputSpec("ids", ("n",), "int64", 10, -10)]


@given(st.binary(max_size=400) | st.binary(max_size=200).map(lambda b: b"PK\x03\x04" + b))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_bytes_as_inputs_are_read_or_refused_naming_the_flag(tmp_path, data):
    """Property: ``--inputs`` of any bytes gives arrays or a ``ValueError`` naming ``--inputs``."""
    path = tmp_path / "in.npz"
    path.write_bytes(data)
    try:
        said = [type(a).__name__ for a in _inputs(SPECS, str(path)).values()]
    except ValueError as err:
        said = [str(err)]
    assert all(s == "ndarray" or s.startswith(f"--inputs {str(path)!r}") for s in said), said


SHIPPED = Path(__file__).resolve().parents[2] / "tvm_hetero/costmodel/models/flexpie"


@given(st.sampled_from(["compute.json", "compute.meta.json"]), st.binary(max_size=300))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_bytes_in_an_estimator_file_are_loaded_or_refused_naming_it(tmp_path, file, data):
    """Property: a FlexPie estimator (``--estimators``) whose trees or description are damaged
    is a ``ValueError`` naming the file, never another exception (XGBoost's own error, a
    ``KeyError`` in the description)."""
    folder = tmp_path / "estimators"
    shutil.copytree(SHIPPED, folder, dirs_exist_ok=True)
    (folder / file).write_bytes(data)
    try:
        said = type(Estimator.load(folder, "compute")).__name__
    except ValueError as err:
        said = str(err)
    assert said == "Estimator" or str(folder / "compute") in said, said
