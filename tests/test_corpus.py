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
