"""Which MiniLM encoder an Embedder runs, decided before any model is loaded (fast tier)."""

from __future__ import annotations

import pytest

from car_rag.embedding import DEFAULT_MODEL, Embedder

torch = pytest.importorskip("torch", reason="the store extra (torch) is not installed")


def test_the_packaged_minilm_on_cpu_runs_on_onnx_anything_else_on_torch() -> None:
    assert Embedder().encoder == "onnx"
    assert Embedder(encoder="torch").encoder == "torch"
    assert Embedder("sentence-transformers/all-mpnet-base-v2").encoder == "torch"
    if torch.cuda.is_available():  # without a GPU, device="cuda" is refused (test_device.py)
        assert Embedder(DEFAULT_MODEL, device="cuda").encoder == "torch"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"encoder": "tensorrt"}, "encoder must be one of onnx, torch, got 'tensorrt'"),
        ({"model_name": "sentence-transformers/all-mpnet-base-v2", "encoder": "onnx"}, "use encoder='torch'"),
        ({"device": "cuda", "encoder": "onnx"}, "runs the packaged .* on CPU"),
    ],
)
def test_an_encoder_that_cannot_run_is_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Embedder(**kwargs)
