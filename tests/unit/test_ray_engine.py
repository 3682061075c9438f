"""``ingest --engine ray`` without Ray installed says which extra brings it, before any store is made;
its Ray options are refused without the engine. (The engine itself: tests/integration/test_ray_ingest.py.)"""

from __future__ import annotations

import sys

import pytest

from car_rag.cli import main
from car_rag.extras import MissingExtraError
from car_rag.store.distributed import ingest_on_ray


def test_ingest_on_ray_without_ray_names_the_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'car-rag\[ray\]'"):
        ingest_on_ray(None, tmp_path / "corpus.jsonl")  # type: ignore[arg-type]  # refused before the store is read


def test_the_cli_without_ray_names_the_extra_and_makes_no_store(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"doc_id": "a", "doc_type": "advisory", "text": "t"}\n')
    argv = ["ingest", str(corpus), "--store", str(tmp_path / "store"), "--policy", "security-advisory", "--engine", "ray"]
    assert main(argv) == 1
    assert "pip install 'car-rag[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_a_ray_address_without_the_ray_engine_is_a_usage_error(capsys, tmp_path) -> None:
    argv = ["ingest", str(tmp_path / "c.jsonl"), "--store", str(tmp_path / "store"), "--ray-address", "127.0.0.1:6379"]
    assert main(argv) == 2
    assert "--engine ray" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_fp16_on_the_ray_engine_is_a_usage_error(capsys, tmp_path) -> None:
    pytest.importorskip("ray")
    argv = ["ingest", str(tmp_path / "c.jsonl"), "--store", str(tmp_path / "store"), "--engine", "ray", "--precision", "fp16"]
    assert main(argv) == 2
    assert "fp32" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()
