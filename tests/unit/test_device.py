"""Where the embedding model runs, decided before any model is loaded or store written (fast tier):
a device that is not there is refused by name, with what to install or check."""

from __future__ import annotations

import json

import pytest

from car_rag.cli import main
from car_rag.embedding import DEFAULT_MODEL, DeviceError, Embedder

torch = pytest.importorskip("torch", reason="the store extra (torch) is not installed")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@no_gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_gpu_that_is_not_there_is_refused_naming_the_device_and_the_fix(device: str) -> None:
    with pytest.raises(DeviceError, match=rf"device '{device}': .*(CUDA build|sees no GPU).*--device cpu"):
        Embedder(device=device)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"device": "gpu"}, "device must be cpu, cuda, cuda:N or mps, got 'gpu'"),
        ({"precision": "fp16"}, "precision 'fp16' runs on a GPU"),
        ({"precision": "bf16"}, "precision must be one of fp32, fp16, got 'bf16'"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"tokenize_ahead": -1}, "tokenize_ahead at least 0"),
    ],
)
def test_options_that_cannot_run_are_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Embedder(**kwargs)


def test_the_cpu_default_is_the_serial_path_and_records_its_build() -> None:
    embedder = Embedder()
    assert embedder.tokenize_ahead == 0 and embedder.batch_size == 64
    assert embedder.build == {"encoder": "onnx", "device": "cpu", "precision": "fp32"}
    assert Embedder(encoder="torch", device="cpu").build == {"encoder": "torch", "device": "cpu", "precision": "fp32"}


@no_gpu
@pytest.mark.parametrize("command", ["ingest", "serve"])
def test_the_cli_refuses_a_missing_gpu_before_writing_anything(tmp_path, capsys, command: str) -> None:
    store = tmp_path / "store"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"doc_id": "d1", "doc_type": "vulnerability_disclosure", "text": "CVE-2099-1: a flaw"}\n')
    if command == "ingest":
        args = ["ingest", str(corpus), "--store", str(store), "--policy", "security-advisory", "--device", "cuda"]
    else:
        store.mkdir()
        config = {"embedding_model": DEFAULT_MODEL, "encoder": "onnx"}  # serve reads no more before the device
        (store / "car-store.json").write_text(json.dumps(config))
        args = ["serve", "--store", str(store), "--device", "cuda:0"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "device 'cuda" in err and "--device cpu" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["corpus.jsonl", *(["store", "car-store.json"] if command == "serve" else [])]
    )


def test_the_cli_refuses_a_device_it_does_not_know(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["query", "--store", "nowhere", "a flaw", "--device", "tpu"])
    assert "must be cpu, cuda, cuda:N or mps, got 'tpu'" in capsys.readouterr().err
