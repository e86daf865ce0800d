"""A corpus subset (``benchmarks/models``): models no one here wrote import, compile and match
ONNX Runtime, at the test suite's input sizes."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "models"))

import corpus


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("lstm_classifier", marks=pytest.mark.slow),
        "bilstm_classifier",
        "gru_classifier",
        "two_tower",
        "erf_encoder",
        "squeezenet1_1",
    ],
)  # lstm_classifier (8 s): bilstm_classifier's LSTM one way (make test-slow)
def test_corpus_model_imports_compiles_and_matches_onnx_runtime(name, tmp_path):
    row = corpus.check(name, tmp_path, rounds=0, small=True)
    assert row["stage"] == "time", row
    assert row["rel_err"] <= corpus.TOLERANCE


def test_the_row_is_the_round_whose_ratio_is_the_median():
    # the columns' own medians (5 and 6) would read 0.83x beside a median ratio of 1.2x
    ours, theirs = [5.0, 5.0, 6.0, 9.0, 2.0], [6.0, 3.0, 5.0, 6.0, 8.0]
    assert corpus.median_round(ours, theirs) == (6.0, 5.0, 6.0 / 5.0)
    assert corpus.median_round([4.0, 1.0], [2.0, 2.0]) == (1.0, 2.0, 0.5)
