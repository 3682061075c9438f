"""all-MiniLM-L6-v2 on ONNX Runtime: the default encoder of the packaged model.

Why: a question embeds in 8.1 ms instead of PyTorch's 13.0 on one core (the perf corpus's
questions, p50), and a process that only queries imports neither torch nor transformers (a
cold ``car-rag query`` on a 10k store costs 1.6 s of CPU instead of 5.9 s). The vectors are
PyTorch's to a cosine of at least 0.999 (``evals/onnx_parity.py`` checks every text of the
benchmark corpora), so stores stay valid.

The ONNX graph is exported once, offline, from the packaged (SHA-256-checked) weights with
``torch.onnx`` — mean pooling and L2 normalisation included, so it returns sentence vectors —
and kept beside the model (``<model>/onnx/``) or, where that folder is not writable, in the
user cache (``$CAR_RAG_CACHE``, else ``$XDG_CACHE_HOME/car-rag``, else ``~/.cache/car-rag``).
A sidecar JSON records the weights it came from and the graph's own SHA-256, checked on load.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from car_rag.extras import require
from car_rag.minilm import MINILM_REVISION, MINILM_SHA256, file_sha256, no_loading_bars, verify_packaged_minilm

__all__ = ["OnnxMiniLM", "cache_dir", "export_locations", "onnx_model_path"]

log = logging.getLogger(__name__)

EXPORT_NAME = "car-rag-minilm.onnx"
EXPORT_FORMAT = 1
"""Bumped when the exported graph changes (inputs, outputs, pooling): older exports are redone."""
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2 (its sentence_bert_config.json)."""
PARITY_TEXTS = (
    "Is the lodash prototype pollution in merge still unpatched?",
    "Release 4.17.12. Changes: hardened object merging; upgraded bundled dependencies.",
    "short",
    "The court overrules its earlier holding. " * 60,  # truncated at MAX_TOKENS
)
"""Texts every fresh export is checked on against PyTorch before it is kept."""


def cache_dir() -> Path:
    """The user cache car-rag writes exports to when the model's folder is read-only."""
    if os.environ.get("CAR_RAG_CACHE"):
        return Path(os.environ["CAR_RAG_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "car-rag"


def export_locations(model_dir: Path) -> list[Path]:
    """Where an export is looked for, and written, in that order: beside the model, then the user cache."""
    return [model_dir / "onnx", cache_dir() / "onnx" / f"all-MiniLM-L6-v2-{MINILM_REVISION[:12]}"]


def _sidecar(onnx_file: Path) -> Path:
    return onnx_file.with_suffix(".json")


def _valid_export(onnx_file: Path) -> bool:
    try:
        meta = json.loads(_sidecar(onnx_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if meta.get("format") != EXPORT_FORMAT or meta.get("weights_sha256") != MINILM_SHA256["model.safetensors"]:
        return False
    if not onnx_file.is_file() or file_sha256(onnx_file) != meta.get("onnx_sha256"):
        log.warning("%s does not match its sidecar's SHA-256 (damaged or replaced): exporting it again", onnx_file)
        return False
    return True


def onnx_model_path(model_dir: Path) -> Path:
    """The exported graph for the packaged model in ``model_dir``: an existing valid export, or
    a new one written to the first writable location. Raises ``OSError`` naming every location
    and the PyTorch fallback when none can be written."""
    locations = export_locations(model_dir)
    for folder in locations:
        if _valid_export(folder / EXPORT_NAME):
            return folder / EXPORT_NAME
    refused = []
    for folder in locations:
        try:
            return _export(model_dir, folder)
        except OSError as exc:  # no permission, a read-only file system, a file in the way, a full disk
            refused.append(f"{folder} ({'a file stands there' if folder.is_file() else exc.strerror or exc})")
    raise OSError(
        f"the ONNX encoder needs an export of all-MiniLM-L6-v2, and there is none in the model directory {model_dir} "
        f"nor in the user cache, and neither can be written: {'; '.join(refused)}. Make one writable once "
        "(CAR_RAG_CACHE=DIR picks the cache) or use the PyTorch encoder: --encoder torch (encoder='torch')"
    )


def _export(model_dir: Path, folder: Path) -> Path:
    """Export the packaged weights to ``folder`` (written atomically, checked against PyTorch first)."""
    verify_packaged_minilm(model_dir)  # the weights too: they become the export
    torch = require("torch", "store", "exporting the ONNX encoder")
    require("onnx", "store", "exporting the ONNX encoder")
    sentence_transformers = require("sentence_transformers", "store", "exporting the ONNX encoder")

    folder.mkdir(parents=True, exist_ok=True)
    log.info("exporting all-MiniLM-L6-v2 to ONNX in %s (once)", folder)
    with no_loading_bars():
        model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu")
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
    if modes != ["pooling_mode_mean_tokens"] or model.max_seq_length != MAX_TOKENS:
        raise RuntimeError(
            f"{model_dir}: the export assumes mean pooling over {MAX_TOKENS} tokens, "
            f"the model has {', '.join(modes)} over {model.max_seq_length}"
        )

    class SentenceVectors(torch.nn.Module):  # type: ignore[misc, name-defined]
        """BERT, then sentence-transformers' mean pooling and L2 normalisation, as one graph."""

        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            mean = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    sample = model.tokenizer(list(PARITY_TEXTS[:2]), padding=True, return_tensors="pt")
    descriptor, temporary = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=folder)
    os.close(descriptor)
    try:
        with warnings.catch_warnings():  # the tracer's notes on constant shapes: the graph is checked below
            warnings.simplefilter("ignore")
            torch.onnx.export(
                SentenceVectors(model[0].auto_model.eval()),
                tuple(sample[name] for name in INPUTS),
                temporary,
                dynamo=False,
                input_names=list(INPUTS),
                output_names=["sentence_embedding"],
                opset_version=17,
                dynamic_axes={**{name: {0: "batch", 1: "tokens"} for name in INPUTS}, "sentence_embedding": {0: "batch"}},
            )
        reference = model.encode(list(PARITY_TEXTS), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        exported = OnnxMiniLM(model_dir, Path(temporary)).encode(PARITY_TEXTS)
        cosine = float((reference * exported).sum(axis=1).min())
        if cosine < 0.999:
            raise RuntimeError(
                f"the ONNX export of {model_dir} disagrees with PyTorch (cosine {cosine:.5f} < 0.999); use encoder='torch'"
            )
        target = folder / EXPORT_NAME
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide a shared install's export from other users
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    meta = {
        "format": EXPORT_FORMAT,
        "weights_sha256": MINILM_SHA256["model.safetensors"],
        "onnx_sha256": file_sha256(target),
        "exported_with": {"torch": str(torch.__version__), "opset": 17},
        "parity_min_cosine": cosine,
    }
    _sidecar(target).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return target


class OnnxMiniLM:
    """Sentence vectors from the exported graph: tokenizer.json through ``tokenizers``, the graph
    through ONNX Runtime on CPU, with as many threads as ``OMP_NUM_THREADS`` gives PyTorch."""

    def __init__(self, model_dir: Path, onnx_file: Path):
        ort = require("onnxruntime", "store", "the ONNX encoder")
        tokenizers = require("tokenizers", "store", "the ONNX encoder")
        self.tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of each batch
        options = ort.SessionOptions()
        threads = os.environ.get("OMP_NUM_THREADS", "")
        options.intra_op_num_threads = int(threads) if threads.isdigit() else 0  # 0: ONNX Runtime's default
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self.dimension = int(self.session.get_outputs()[0].shape[1])

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        """L2-normalised float32 vectors; texts are batched by length, as sentence-transformers does,
        so a batch pads little."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        starts: Iterable[int] = range(0, len(texts), batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Batches", unit="batch")
        for start in starts:
            rows = order[start : start + batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in rows])
            feeds = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            out[rows] = self.session.run(None, feeds)[0]
        return out
