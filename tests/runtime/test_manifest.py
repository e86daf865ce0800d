"""A compiled model's manifest: every field a run reads is checked, naming the field."""

import contextlib
import copy
import json
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_hetero.cli.main import main
from tvm_hetero.runtime.deployment import Deployment, read_manifest
from tvm_hetero.runtime.manifest import ArtifactError


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A two-device mlp (units, copies and a tuple item) saved as a .tar."""
    path = tmp_path_factory.mktemp("manifest") / "m.tar"
    argv = ["compile", "mlp:tiny", "--device", "cpu@0", "--device", "cpu@1", "--place",
            "matmul=cpu@1", "-o", str(path)]  # fmt: skip
    assert main(argv) == 0
    return path


def _edited(manifest: dict, path: tuple, value: object, delete: bool) -> dict:
    data = copy.deepcopy(manifest)
    at = data
    for key in path[:-1]:
        at = at[key]
    if delete and isinstance(at, dict):
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return data


def _paths(value: object, prefix: tuple = ()):
    if prefix:
        yield prefix
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        yield from _paths(item, (*prefix, key))


CASES = [
    (("steps",), None, True, r"manifest\.steps: must be a list"),
    (("inputs", 0, "shape"), [-1, 16], False, r"manifest\.inputs\[0\]\.shape: must be a list of sizes >= 0"),
    (("inputs", 0, "dtype"), None, True, r"manifest\.inputs\[0\]\.dtype: must be a number type"),
    (("steps", 0, "device"), 7, False, r"manifest\.steps\[0\]\.device: must be a device index in \[0, 2\)"),
    (("steps", 0, "kind"), "exec", False, r"manifest\.steps\[0\]\.kind: must be one of"),
    (("outputs", 0), "ghost", False, r"manifest\.outputs\[0\]: 'ghost' is no input or step"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "delete", "message"), CASES)
def test_a_bad_field_is_named(compiled, path, value, delete, message):
    manifest = read_manifest(compiled)
    Deployment.from_manifest(manifest)  # the saved one is good
    with pytest.raises(ArtifactError, match=message):
        Deployment.from_manifest(_edited(manifest, path, value, delete))


def test_run_of_a_tar_without_steps_is_one_line_with_exit_2(compiled, tmp_path, capsys):
    manifest = read_manifest(compiled)
    bad = tmp_path / "bad.tar"
    (tmp_path / "manifest.json").write_text(json.dumps(_edited(manifest, ("steps",), None, True)))
    with tarfile.open(compiled) as src, tarfile.open(bad, "w") as out:
        for member in src.getmembers():
            if member.name != "manifest.json":
                out.addfile(member, src.extractfile(member))
        out.add(tmp_path / "manifest.json", "manifest.json")
    assert main(["run", str(bad)]) == 2
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("tvm-hetero run:") and "manifest.steps: must be a list" in said


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


@given(data=st.data())
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_any_field_replaced_or_removed_is_accepted_or_named(compiled, data):
    """Property: one field of a real manifest replaced by any JSON value, or removed, gives a
    deployment or an ``ArtifactError`` / ``SpecError`` (both ``ValueError``: one line, exit 2),
    never another exception."""
    manifest = read_manifest(compiled)
    path = data.draw(st.sampled_from(list(_paths(manifest))))
    edited = _edited(manifest, path, data.draw(JSON), data.draw(st.booleans()))
    with contextlib.suppress(ValueError):
        Deployment.from_manifest(edited)
