"""The chat client a reader evaluation calls: any OpenAI-compatible server, at temperature 0."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from car_rag.extras import require
from car_rag_evals.llm.cache import AnswerCache, cache_key

__all__ = ["ChatClient"]


class ChatClient:
    """The ``openai`` client at temperature 0, with retries, a timeout and the answer cache.

    ``api_key`` defaults to ``$OPENAI_API_KEY``, else ``"sk-local"`` (local servers ignore it).
    Retries (connection errors, timeouts, 408/409/429 and 5xx) are the client's own, with
    exponential backoff; ``max_retries`` of them per call.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        cache: AnswerCache | None = None,
        max_tokens: int = 512,
    ):
        openai = require("openai", "llm", "the reader evaluation's chat client")
        self.model = model
        self.max_tokens = max_tokens
        self.cache = cache
        self.calls = 0
        self.cache_hits = 0
        self._lock = threading.Lock()
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "sk-local",
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, messages: Sequence[dict[str, str]]) -> str:
        key = cache_key(self.model, messages)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                with self._lock:
                    self.cache_hits += 1
                return hit
        with self._lock:
            self.calls += 1
        response = self.client.chat.completions.create(
            model=self.model,
            messages=list(messages),
            temperature=0,
            max_tokens=self.max_tokens,
        )
        answer = response.choices[0].message.content or ""
        if self.cache is not None:
            usage = getattr(response, "usage", None)
            tokens = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens} if usage else {}
            self.cache.put(key, answer, model=self.model, **tokens)
        return answer

    def usage(self, messages: Sequence[dict[str, str]]) -> dict[str, Any]:
        """Prompt and completion tokens the server reported for these messages, when cached."""
        if self.cache is None:
            return {}
        meta = self.cache.meta(cache_key(self.model, messages))
        return {k: meta[k] for k in ("prompt_tokens", "completion_tokens") if k in meta}
