"""The optional LLM route: an OpenAI-compatible endpoint asked what the patterns left empty.

Off unless the policy has ``[extract.llm]``. For a document no pattern typed (and a policy with
doc-type patterns to choose among) and a document in which no header or sentence gave an edge,
one call asks for the document's type (one of the policy's, or null) and for the documents it
says it supersedes or is superseded by, as the text writes them. Its answer must validate
against a JSON schema (structured output); each identifier is then resolved like any citation
(:meth:`~car_rag.extract.identifiers.IdentifierResolver.value`): an unresolved one is reported,
never an edge. Edges from this route carry the policy's ``confidence`` (default 0.45: below the
default τ, so they mark a target contested until you have measured the route on your own
documents and raised it). Answers are cached on disk by prompt version, model, types and text
(:mod:`car_rag.llm_endpoint`, shared with the LLM scope extractor): a re-run asks nothing it
asked before, and a run stopped halfway resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from car_rag.llm_endpoint import EndpointError, JSONEndpoint
from car_rag.policy import LLMExtractor

__all__ = ["LLMAnswer", "LLMRoute", "LLMRouteError", "PROMPT_VERSION"]

PROMPT_VERSION = 2
"""Part of every cache key: a changed prompt must not reuse answers to the old one. Version 1 gave
an example identifier ("POL-7"); a 1.5B model copied it into 4 of its first 10 answers on KEPs
(``superseded_by: ["POL-7"]``, ``"POL-2433"`` for "KEP 2433"), so version 2 gives none."""

SYSTEM_PROMPT = """\
You read one document of a collection and report what it states about its own authority, for a \
retrieval index. Answer with a JSON object with exactly the keys asked for. "supersedes": the \
documents this document says it supersedes, replaces, obsoletes, rescinds or withdraws; \
"superseded_by": the documents the text says replace or supersede this one. Copy each exactly \
as the text writes it (its identifier or its title, letters and digits unchanged); a list is \
empty when the text states no such thing. A document that is only cited, \
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
        self.config, self.doc_types = config, doc_types
        self.schema = _schema(doc_types)
        self.endpoint = JSONEndpoint(
            config, cache_dir, name="LLM route", purpose="the LLM route of car-rag extract ([extract.llm])", prefix="extract-"
        )

    @property
    def calls(self) -> int:
        """Calls made to the endpoint (a cached answer is none)."""
        return self.endpoint.calls

    def ask(self, text: str) -> LLMAnswer:
        """What the endpoint reads in ``text`` (cached); raises :class:`LLMRouteError`."""
        text = text[: self.config.max_chars]
        types = ", ".join(self.doc_types) if self.doc_types else "(none: answer null)"
        try:
            data = self.endpoint.ask(
                [PROMPT_VERSION, self.config.model, self.doc_types, text],
                SYSTEM_PROMPT,
                f"Types: {types}\n\n{text}",
                self.schema,
                schema_name="extracted_authority",
                wanted="the JSON asked for",
            )
        except EndpointError as exc:
            raise LLMRouteError(str(exc)) from None
        clean = tuple(dict.fromkeys(v.strip() for v in data["supersedes"] if v.strip()))
        back = tuple(dict.fromkeys(v.strip() for v in data["superseded_by"] if v.strip()))
        return LLMAnswer(data["doc_type"], clean, back)
