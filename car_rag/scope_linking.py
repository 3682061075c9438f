"""Scope linking: the scope values a question names in its own words.

Policy ``scope_patterns`` catch identifiers with a shape (``CVE-2019-10744``); a package
called ``express``, a drug called ``metformin``, a party, a ticker written as a word have
none. This module reads the question's word n-grams against every scope value the store
holds, normalised (case, punctuation, a possessive ``'s``): ``Node.js`` names ``nodejs``,
``Roberts v. Moore, 312 U.S. 760`` names ``roberts_v_moore_312us760``, ``EMP030-Harris's``
names ``EMP030-Harris``. Exact forms are tried first; then two bounded fuzzy steps: a
plural ending dropped (``metformins``), and a name given without the numbers its value
carries (``Harlan v. Mercer`` for ``harlan_v_mercer_611f3d204``). Values of three characters or fewer (``C``, ``GE``, ``go``)
link only where the question writes them verbatim, case included.

A match is a *candidate*: ``express`` is also an English verb. :func:`accepted_links`
keeps a candidate only where the evidence says the word names the entity here: its
*specificity* (of the records whose text holds the value's words, the share that carry the
value; a common word held by many other records scores low: the IDF weighting) and its
*support* (the share of the question's scope posterior that Stage 1 already puts on scopes
with that value).
"""

from __future__ import annotations

import json
import re
import unicodedata
import weakref
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from car_rag.graph import AuthorityGraph, DatedGraph
from car_rag.mapped_files import META, StringColumn, hash64
from car_rag.records import Record

__all__ = [
    "Link",
    "ScopeValueIndex",
    "ScopeVocabulary",
    "MappedVocabulary",
    "question_forms",
    "candidate_links",
    "accepted_links",
    "value_index",
    "LINK_SUPPORT",
    "LINK_SPECIFICITY",
    "LINK_MIN_SUPPORT",
    "MAX_WORDS",
]

LINK_SUPPORT = 0.5
"""A candidate links when Stage 1 already puts at least this share of the scope posterior on
scopes holding the value (chosen on the dev suites: ``evals/do_no_harm.py``)."""
LINK_SPECIFICITY = 0.5
"""…or when at least this share of the records whose text holds the value's words carry the
value (the word names the entity in this corpus, not something else)…"""
LINK_MIN_SUPPORT = 0.05
"""…and Stage 1 gives its scopes at least this share: a specific word the question uses in
another sense ("how do I express …") is not linked where the posterior says no."""
MAX_WORDS = 8
"""The longest run of question words read as one value (a case citation runs to seven)."""
SHORT = 3
"""Values this short or shorter link only verbatim (tickers such as ``C``, ``GE``)."""

_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(STOPWORDS_EN)


def words(text: str) -> list[str]:
    """``text``'s words, normalised: NFKC, lower case, a possessive ``'s`` dropped, split at
    anything that is not a letter or a digit."""
    return _WORD.findall(_POSSESSIVE.sub("", unicodedata.normalize("NFKC", text)).lower())


def forms(value: str) -> dict[str, bool]:
    """The normalised forms a value is found by, each with whether it is only a partial form:
    its words spaced, and run together (exact); and for a value whose words are a name plus
    numbers, the name alone (``harlan v mercer`` for ``harlan_v_mercer_611f3d204``: a case
    named without its citation), a partial form."""
    parts = words(value)
    out = {" ".join(parts): False, "".join(parts): False}
    name = [w for w in parts if not any(ch.isdigit() for ch in w)]
    if len(name) >= 2 and len(name) < len(parts):
        out.setdefault(" ".join(name), True)
    out.pop("", None)
    return out


@dataclass(frozen=True)
class Link:
    """Scope value ``value`` of ``key``, named by the question's words ``words``."""

    key: str
    value: str
    words: str
    match: Literal["exact", "fuzzy"]
    specificity: float | None = None
    """Of the records whose text holds the value's words, the share carrying the value (None:
    no record's text holds them, e.g. a one-letter ticker the BM25 tokenizer drops)."""
    support: float = 0.0
    """The share of the question's scope posterior on scopes holding the value, before linking."""

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "value": self.value,
            "words": self.words,
            "match": self.match,
            "specificity": None if self.specificity is None else round(self.specificity, 4),
            "support": round(self.support, 4),
        }


class ScopeValueIndex:
    """Normalised forms of every scope value a graph holds, kept in step with its inserts
    (it reads only the pairs added since it last looked)."""

    def __init__(self, graph: AuthorityGraph):
        # Weakly: :func:`value_index` keeps each index under its graph in a WeakKeyDictionary, and a
        # value holding its key would keep every graph alive (a graph per query, with Stage 2 in SQL).
        self._graph = weakref.ref(graph)
        self._position = 0
        self._forms: dict[str, set[tuple[str, str, bool]]] = defaultdict(set)

    def lookup(self, form: str) -> set[tuple[str, str, bool]]:
        """``(key, value, partial)`` for the values still held that have ``form``."""
        graph = self._graph()
        assert graph is not None  # an index is used through its graph
        pairs, self._position = graph.scope_values_since(self._position)
        for key, value in pairs:
            for f, partial in forms(value).items():
                self._forms[f].add((key, value, partial))
        return {entry for entry in self._forms.get(form, ()) if graph.holds(entry[0], entry[1])}


_INDEXES: weakref.WeakKeyDictionary[AuthorityGraph, ScopeValueIndex] = weakref.WeakKeyDictionary()


def value_index(graph: AuthorityGraph) -> ScopeValueIndex:
    """The graph's scope-value index, built on first use and then kept in step. A graph as of a
    date (:class:`~car_rag.graph.DatedGraph`) shares its live graph's forms (a value's forms do not
    depend on the date; which values it holds is its own :meth:`~AuthorityGraph.holds`)."""
    index = _INDEXES.get(graph)
    if index is None:
        index = _INDEXES[graph] = ScopeValueIndex(graph)
        if isinstance(graph, DatedGraph):
            live = value_index(graph.base)
            index._forms, index._position = live._forms, live._position
    return index


def _spans(query: str) -> list[tuple[int, int, str, list[str]]]:
    """Every run of up to MAX_WORDS words: (start, end, verbatim text, normalised words)."""
    text = _POSSESSIVE.sub("", unicodedata.normalize("NFKC", query))
    found = [(m.start(), m.end(), m.group(0)) for m in _WORD.finditer(text)]
    spans = []
    for i in range(len(found)):
        for j in range(i + 1, min(i + MAX_WORDS, len(found)) + 1):
            parts = [w.lower() for _, _, w in found[i:j]]
            spans.append((i, j, text[found[i][0] : found[j - 1][1]], parts))
    return spans


def _fuzzy(word: str) -> list[str]:
    """A plural ending dropped (bounded: words of five letters or more, one ending)."""
    if len(word) < 5 or not word.isalpha():
        return []
    return [word[:-2]] * word.endswith("es") + [word[:-1]] * word.endswith("s")


def _tries(parts: list[str]) -> list[tuple[str, Literal["exact", "fuzzy"]]]:
    """The forms a span of normalised words is looked up by, in order: spaced, run together, then fuzzy."""
    tries: list[tuple[str, Literal["exact", "fuzzy"]]] = [(" ".join(parts), "exact"), ("".join(parts), "exact")]
    if len(parts) == 1:
        tries += [(f, "fuzzy") for f in _fuzzy(parts[0])]
    return tries


def question_forms(query: str) -> set[str]:
    """Every form :func:`candidate_links` may look ``query``'s words up by: what a store that
    does not hold its scope values in a graph (:class:`ScopeVocabulary`) must have at hand."""
    spans = [parts for _, _, _, parts in _spans(query) if not (len(parts) == 1 and parts[0] in _STOP)]
    return {form for parts in spans for form, _ in _tries(parts)}


class ScopeVocabulary:
    """The forms of a store's scope values without its records: ``(key, value)`` pairs by form,
    for a worker that reads a query's records from the database (``stage2="sql"``) and must
    know which values the question may name before it asks. A value no record holds any more
    stays: asking for its records finds none."""

    def __init__(self) -> None:
        self._forms: dict[str, set[tuple[str, str]]] = defaultdict(set)

    def add(self, pairs: Iterable[tuple[str, str]]) -> None:
        for key, value in pairs:
            for form in forms(value):
                self._forms[form].add((key, value))

    def named_by(self, query: str) -> set[tuple[str, str]]:
        """Every ``(key, value)`` some form of ``query``'s words names: a superset of what
        :func:`candidate_links` links, which then decides among them over their records."""
        return {pair for form in question_forms(query) for pair in self._forms.get(form, ())}


class MappedVocabulary:
    """:class:`ScopeVocabulary`'s lookup from files a worker maps, not its heap (a 10M-record
    store's values are gigabytes as Python sets): each value's forms as sorted 64-bit hashes, each
    beside the position of its ``(key, value)``; a hash found is checked against the value's own
    forms, so two forms sharing a hash never name the wrong value. Pairs :meth:`add` gives after
    the files were written are held in a :class:`ScopeVocabulary` (:attr:`added`)."""

    def __init__(self, folder: Path) -> None:
        """The vocabulary :meth:`write` put in ``folder``, mapped."""
        self.values = StringColumn(folder / "values")
        self._keys: list[str] = json.loads((folder / "keys.json").read_text())
        self._key_of = np.load(folder / "value-keys.npy", mmap_mode="r")
        self._hashes = np.load(folder / "form-hashes.npy", mmap_mode="r")
        self._owners = np.load(folder / "form-values.npy", mmap_mode="r")
        self.added = ScopeVocabulary()

    @classmethod
    def write(cls, folder: Path, pairs: Iterable[tuple[str, str]], meta: Mapping[str, object] | None = None) -> MappedVocabulary:
        """Write the forms of ``pairs`` (read once, distinct) into ``folder``, then ``index.json``
        holding ``meta``; the vocabulary, mapped."""
        keys: dict[str, int] = {}
        key_of, hashes, owners = array("i"), array("Q"), array("q")

        def values() -> Iterator[str]:
            for position, (key, value) in enumerate(pairs):
                key_of.append(keys.setdefault(key, len(keys)))
                for form in forms(value):
                    hashes.append(hash64(form))
                    owners.append(position)
                yield value

        StringColumn.write(folder / "values", values())
        (folder / "keys.json").write_text(json.dumps(list(keys)))
        np.save(folder / "value-keys.npy", np.frombuffer(key_of, dtype=np.int32))
        by_hash = np.frombuffer(hashes, dtype=np.uint64)
        order = np.argsort(by_hash, kind="stable")
        np.save(folder / "form-hashes.npy", by_hash[order])
        np.save(folder / "form-values.npy", np.frombuffer(owners, dtype=np.int64)[order])
        (folder / META).write_text(json.dumps({"kind": "scope-vocabulary", **(meta or {})}))
        return cls(folder)

    def __len__(self) -> int:
        """The pairs in its files (those added since not counted)."""
        return len(self.values)

    def add(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.added.add(pairs)

    def named_by(self, query: str) -> set[tuple[str, str]]:
        """What :meth:`ScopeVocabulary.named_by` returns over the same pairs."""
        found = self.added.named_by(query)
        for form in question_forms(query):
            target = np.uint64(hash64(form))
            first, last = np.searchsorted(self._hashes, target, side="left"), np.searchsorted(self._hashes, target, side="right")
            for position in self._owners[first:last].tolist():
                value = self.values[position]
                if form in forms(value):
                    found.add((self._keys[int(self._key_of[position])], value))
        return found


def candidate_links(query: str, graph: AuthorityGraph, readable: Callable[[Record], bool] | None = None) -> list[Link]:
    """Scope values the question's words match (longest first, spans not overlapping), among
    values held by records ``readable`` allows: a caller never learns that a value exists in
    records it may not read."""
    index = value_index(graph)
    taken: set[int] = set()
    links: list[Link] = []
    for start, end, verbatim, parts in sorted(_spans(query), key=lambda s: (s[0] - s[1], s[0])):
        if taken & set(range(start, end)):
            continue
        if len(parts) == 1 and parts[0] in _STOP:
            continue
        matched = []
        for form, how in _tries(parts):
            for key, value, partial in sorted(index.lookup(form)):
                if len(value) <= SHORT and value != verbatim:
                    continue
                if readable is not None and not any(readable(graph.records[d]) for d in graph.scope_members(key, value)):
                    continue
                matched.append(Link(key, value, verbatim, "fuzzy" if partial else how))
            if matched:
                break
        if matched:
            taken |= set(range(start, end))
            links += [m for m in matched if (m.key, m.value) not in {(x.key, x.value) for x in links}]
    return links


def accepted_links(
    links: Iterable[Link],
    graph: AuthorityGraph,
    support: Callable[[str, str], float],
    document_frequency: Callable[[str], int] | None = None,
    readable: Callable[[Record], bool] | None = None,
) -> list[Link]:
    """The candidates the evidence says name the entity (see the module's docstring): each
    returned with its specificity and support filled in. Specificity counts the records
    ``readable`` allows on both sides (``document_frequency`` must count those alone too), so
    no other tenant's records move it."""
    kept = []
    for link in links:
        share = support(link.key, link.value)
        specificity = None
        if document_frequency is not None:
            held_by = document_frequency(" ".join(words(link.value)))
            if held_by > 0:
                members = graph.scope_members(link.key, link.value)
                scoped = len(members) if readable is None else sum(1 for d in members if readable(graph.records[d]))
                specificity = min(1.0, scoped / held_by)
        specific = specificity is not None and specificity >= LINK_SPECIFICITY and share >= LINK_MIN_SUPPORT
        if share >= LINK_SUPPORT or specific:
            kept.append(Link(link.key, link.value, link.words, link.match, specificity, share))
    return kept


def values_by_key(links: Sequence[Link]) -> dict[str, list[str]]:
    """Linked values grouped by scope key, in the question's order."""
    out: dict[str, list[str]] = {}
    for link in links:
        if link.value not in out.setdefault(link.key, []):
            out[link.key].append(link.value)
    return out


def merge(first: Mapping[str, Sequence[str]], second: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Values by key from both, ``first``'s first."""
    out = {k: list(v) for k, v in first.items()}
    for key, values in second.items():
        out.setdefault(key, [])
        out[key] += [v for v in values if v not in out[key]]
    return out
