import subprocess
import sys
from pathlib import Path

import pytest

from tvm_hetero.pipelines import PIPELINES, get_pipeline, load_pipeline

ROOT = Path(__file__).resolve().parent.parent


def test_catalogue_is_up_to_date():
    result = subprocess.run(
        [sys.executable, "ci/gen_catalog.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_toml_pipelines_match_the_registry(name):
    assert load_pipeline(ROOT / "passes" / "pipelines" / f"{name}.toml") == PIPELINES[name]


def test_pipeline_parameters_are_checked():
    with pytest.raises(ValueError, match=r"missing \['assignment'\]"):
        get_pipeline("manual_placement", vdevices=[])
    with pytest.raises(ValueError, match="unknown pipeline 'fast'"):
        get_pipeline("fast")
