"""One OpenAI-compatible endpoint asked for JSON that must validate against a schema, answers cached on disk.

Shared by the LLM scope extractor (:mod:`car_rag.extractors`, ``record_scope.llm``) and the LLM
route of :mod:`car_rag.extract` (``[extract.llm]``): each brings its prompt, its schema and what
its cache key is made of; this module owns the client, strict structured output, validation, the
messages that name the endpoint, and the cache (one file per answer, written whole or not at all,
so a re-run asks nothing it asked before and a run stopped halfway resumes).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from car_rag.extras import require
from car_rag.policy import LLMScopeExtractor

__all__ = ["EndpointError", "JSONEndpoint"]


class EndpointError(ValueError):
    """No valid answer (a timeout, a refused call, output off the schema); the message names the endpoint."""


class JSONEndpoint:
    """The endpoint of ``config``, named ``name`` in messages, its answers cached in ``cache_dir``
    under ``prefix``; ``purpose`` says what needs the ``llm`` extra when it is missing."""

    def __init__(self, config: LLMScopeExtractor, cache_dir: Path, *, name: str, purpose: str, prefix: str):
        self._openai = require("openai", "llm", purpose)
        self.config, self.cache_dir, self.name, self.prefix = config, cache_dir, name, prefix
        self.calls = 0
        self.client = self._openai.OpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "sk-local",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    def ask(
        self, key: Sequence[object], system: str, user: str, schema: type[BaseModel], *, schema_name: str, wanted: str
    ) -> dict[str, Any]:
        """The answer to ``user`` as ``schema`` dumps it (by alias), from the cache under ``key``
        (what the answer depends on: prompt version, model, text…) when asked before; ``wanted``
        says what was asked for when the answer is off the schema."""
        digest = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()
        path = self.cache_dir / f"{self.prefix}{digest}.json"
        if path.is_file():
            try:
                return self._parse(path.read_text(encoding="utf-8"), schema, wanted)
            except EndpointError:
                pass  # not an answer to this schema (a values-only file from before): asked again
        content = self._call(system, user, schema, schema_name)
        answer = self._parse(content, schema, wanted)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=self.cache_dir, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
            tmp.write(content)
        os.replace(tmp.name, path)  # whole or absent: a crash cannot leave half an answer
        return answer

    def _parse(self, content: str, schema: type[BaseModel], wanted: str) -> dict[str, Any]:
        try:
            parsed: dict[str, Any] = schema.model_validate_json(content).model_dump(by_alias=True)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(map(str, problem["loc"]))
            raise EndpointError(
                f"{self.name} ({self.config.model}) returned {content!r:.80}, not {wanted}: "
                f"{where + ': ' if where else ''}{problem['msg']}"
            ) from None
        return parsed

    def _call(self, system: str, user: str, schema: type[BaseModel], schema_name: str) -> str:
        where = f"{self.name} ({self.config.model} at {self.config.base_url})"
        self.calls += 1
        try:
            response = self.client.chat.completions.create(
                model=self.config.model,
                temperature=0,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                response_format=self._response_format(schema, schema_name),
            )
        except self._openai.APITimeoutError:
            raise EndpointError(f"{where} timed out after {self.config.timeout_s:g} s") from None
        except self._openai.APIError as exc:
            hint = ""
            if "response_format" in str(exc) and self.config.response_format == "json_schema":
                hint = ' (a server that refuses OpenAI\'s json_schema form may take response_format = "json_object")'
            raise EndpointError(f"{where} failed: {exc}{hint}") from None
        content = response.choices[0].message.content if response.choices else None
        return content or ""

    def _response_format(self, schema: type[BaseModel], schema_name: str) -> dict[str, Any]:
        """The structured-output request in the form the endpoint takes (``response_format`` in the policy)."""
        body = schema.model_json_schema(by_alias=True)
        if self.config.response_format == "json_object":
            return {"type": "json_object", "schema": body}
        return {"type": "json_schema", "json_schema": {"name": schema_name, "strict": True, "schema": body}}
