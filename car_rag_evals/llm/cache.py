"""The answer cache: every model answer on disk as it arrives, keyed by model and messages,
so a crash loses nothing and a re-run costs nothing."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["AnswerCache", "cache_key"]


def cache_key(model: str, messages: Sequence[dict[str, str]]) -> str:
    """sha256 of the model name and the exact messages (canonical JSON)."""
    blob = json.dumps({"model": model, "messages": list(messages)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    """Append-only JSONL of ``{"key", "model", "answer", ...}``; one line per answer, flushed
    as written. A torn last line (crash mid-write) is skipped on load."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._data[entry["key"]] = entry["answer"]
                self._meta[entry["key"]] = {k: v for k, v in entry.items() if k not in ("key", "answer")}

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._data.get(key)

    def meta(self, key: str) -> dict[str, Any]:
        """What was stored beside an answer (model, token usage); empty when unknown."""
        with self._lock:
            return dict(self._meta.get(key, {}))

    def put(self, key: str, answer: str, **meta: Any) -> None:
        with self._lock:
            self._data[key] = answer
            self._meta[key] = meta
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"key": key, "answer": answer, **meta}, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    def __len__(self) -> int:
        return len(self._data)
