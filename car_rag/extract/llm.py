"""The optional LLM route: an OpenAI-compatible endpoint asked what the patterns left empty.

Off unless the policy has ``[extract.llm]``. For a document no pattern typed (and a policy with
doc-type patterns to choose among) and a document in which no header or sentence gave an edge,
one call asks for the document's type (one of the policy's, or null) and for the documents it
says it supersedes or is superseded by, as the text writes them. Its answer must validate
against a JSON schema (structured output); each identifier is then resolved like any citation
(:meth:`~car_rag.extract.identifiers.IdentifierResolver.value`): an unresolved one is reported,
never an edge. Edges from this route carry the policy's ``confidence`` (default 0.45: below the
default τ, so they mark a target contested until you have measured the route on your own
documents and raised it). Answers are cached on disk by prompt version, model, types and text:
a re-run asks nothing it asked before, and a run stopped halfway resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from car_rag.extras import require
from car_rag.policy import LLMExtractor

__all__ = ["LLMAnswer", "LLMRoute", "LLMRouteError", "PROMPT_VERSION"]

PROMPT_VERSION = 1
"""Part of every cache key: a changed prompt must not reuse answers to the old one."""

SYSTEM_PROMPT = """\
You read one document of a collection and report what it states about its own authority, for a \
retrieval index. Answer with a JSON object with exactly the keys asked for. "supersedes": the \
documents this document says it supersedes, replaces, obsoletes, rescinds or withdraws; \
"superseded_by": the documents the text says replace or supersede this one. Write each as the \
text writes it (an identifier such as "POL-7", or a title). A document that is only cited, \
referenced, built on or compared with is not superseded: leave it out. "doc_type": one of the \
types offered, or null when none fits. Never guess what the text does not state."""


class LLMRouteError(ValueError):
    """The endpoint could not answer for a document (timeout, refusal, output off the schema)."""


@dataclass(frozen=True)
class LLMAnswer:
    doc_type: str | None
    supersedes: tuple[str, ...]
    superseded_by: tuple[str, ...]


def _schema(types: tuple[str, ...]) -> type[BaseModel]:
    """Every key required, nothing else (strict structured output); ``doc_type`` one of ``types`` or null."""
    doc_type: Any = Literal[types] | None if types else type(None)
    model: type[BaseModel] = create_model(
        "ExtractedAuthority",
        __config__=ConfigDict(extra="forbid"),
        doc_type=(doc_type, Field(default=...)),
        supersedes=(list[str], Field(default=...)),
        superseded_by=(list[str], Field(default=...)),
    )
    return model


class LLMRoute:
    """Asks the endpoint of ``config`` about one document at a time (see the module docstring)."""

    def __init__(self, config: LLMExtractor, doc_types: tuple[str, ...], cache_dir: Path):
        openai = require("openai", "llm", "the LLM route of car-rag extract ([extract.llm])")
        self.config, self.doc_types, self.cache_dir, self._openai = config, doc_types, cache_dir, openai
        self.schema = _schema(doc_types)
        self.calls = 0
        self.client = openai.OpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "sk-local",
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    def ask(self, text: str) -> LLMAnswer:
        """What the endpoint reads in ``text`` (cached); raises :class:`LLMRouteError`."""
        text = text[: self.config.max_chars]
        key = json.dumps([PROMPT_VERSION, self.config.model, self.doc_types, text])
        path = self.cache_dir / f"extract-{hashlib.sha256(key.encode()).hexdigest()}.json"
        if path.is_file():
            return self._answer(path.read_text(encoding="utf-8"))
        content = self._call(text)
        answer = self._answer(content)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=self.cache_dir, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
            tmp.write(content)
        os.replace(tmp.name, path)  # whole or absent: a crash cannot leave half an answer
        return answer

    def _answer(self, content: str) -> LLMAnswer:
        try:
            parsed = self.schema.model_validate_json(content)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(map(str, problem["loc"]))
            raise LLMRouteError(
                f"LLM route ({self.config.model}) returned {content!r:.80}, not the JSON asked for: "
                f"{where + ': ' if where else ''}{problem['msg']}"
            ) from None
        data = parsed.model_dump()
        clean = tuple(dict.fromkeys(v.strip() for v in data["supersedes"] if v.strip()))
        back = tuple(dict.fromkeys(v.strip() for v in data["superseded_by"] if v.strip()))
        return LLMAnswer(data["doc_type"], clean, back)

    def _call(self, text: str) -> str:
        where = f"LLM route ({self.config.model} at {self.config.base_url})"
        types = ", ".join(self.doc_types) if self.doc_types else "(none: answer null)"
        self.calls += 1
        try:
            response = self.client.chat.completions.create(
                model=self.config.model,
                temperature=0,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"Types: {types}\n\n{text}"},
                ],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "extracted_authority", "strict": True, "schema": self.schema.model_json_schema()},
                },
            )
        except self._openai.APITimeoutError:
            raise LLMRouteError(f"{where} timed out after {self.config.timeout_s:g} s") from None
        except self._openai.APIError as exc:
            raise LLMRouteError(f"{where} failed: {exc}") from None
        content = response.choices[0].message.content if response.choices else None
        return content or ""
