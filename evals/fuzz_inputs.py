"""Input fuzz: malformed and hostile records and policies, through the API and the CLI.

Every case is one corpus file (JSONL) or one policy file (TOML or JSON) built from a valid
one by a seeded mutation, in these categories:

records   wrong types, huge values (a few 5 MB texts), deep nesting, invalid UTF-8, byte-order
          marks, duplicate ids (and keys, and re-ingests of stored records), supersession
          cycles (explicit, explicit against a rule, through a stored record), unknown
          fields, empty or reserved scope keys and values, numeric dates, the reserved tenant,
          JSON that is not an object or not JSON, Python objects (API only), valid records;
          a third of the cases also carry a valid line, which must be stored regardless
policies  bad TOML/JSON, invalid UTF-8, byte-order marks, deep nesting, unknown fields, bad
          regexes, rules naming unknown keys, duplicate rule names, symmetric rules without
          order, wrong types, missing or empty rules, duplicate or blank scope keys, unknown
          vocabularies, valid policies

Each case goes to the API (``CARStore.ingest`` of the file, or of the decoded items, or
``load_policy`` and then ``CARStore.open`` with the policy) against a store that already
holds a small check corpus; a sample also goes to ``car-rag ingest`` as a subprocess,
against a second such store. A case passes when:

- it ends in success or a clear error: no exception but ``PolicyError`` / ``StoreError``
  where those are the answer; every rejected line reported with its line number, the
  ``doc_id`` it carries and (where the mutation targets one) the field; no error message
  over 400 characters; a line the mutation left valid is stored, one it broke is not;
- on the CLI, the exit code is 0 when nothing was rejected, 1 when records were (each named
  by ``file:line``) and 1 for a policy error (its one line names the command), and stderr holds
  no traceback;
- the pre-existing store answers its check queries identically (ranked doc ids, statuses,
  hidden superseders, for three callers) and holds its check records, edges and Chroma
  entries unchanged; it holds exactly the records accepted so far, each of which reads
  back from its stored JSON as it was written.

At the end the API store is reopened from disk and the CLI store queried through
``car-rag query``: both must still answer the check queries as before. Check queries are
single made-up words and a CVE id that no fuzz record carries, so records accepted on the
way cannot change their answers (one-word BM25 ranks do not depend on corpus statistics).

Run:  python evals/fuzz_inputs.py --cases 10000 [--seed 20240611] [--cli-cases 120] [--out evals/results/fuzz_inputs.txt]
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CallerContext, CARStore, ControllingAuthorityRetriever, Embedder, Record  # noqa: E402
from car_rag.channels import DenseChannel  # noqa: E402
from car_rag.evidence import render_audit  # noqa: E402
from car_rag.policy import PolicyError, load_policy  # noqa: E402
from car_rag.store import StoreError  # noqa: E402

__all__ = ["Case", "FuzzReport", "Line", "Violation", "build_case", "format_report", "run_fuzz"]

POLICY = "security-advisory"
MAX_MESSAGE = 400

# ---------------------------------------------------------------------- the pre-existing store
CHECK_RECORDS: list[dict[str, Any]] = [
    {"doc_id": "chk-alpha-disclosure", "doc_type": "vulnerability_disclosure", "published_at": "2024-01-10",
     "text": "qzalpha qzalphadisc heap overflow in the parser", "scope": {"package": "qzalphapkg", "cve_id": "CVE-2097-0001"}},
    {"doc_id": "chk-alpha-patch1", "doc_type": "patch_release", "published_at": "2024-02-10", "version": "1.0.1",
     "text": "qzalpha release notes fix the parser overflow", "scope": {"package": "qzalphapkg", "cve_id": "CVE-2097-0001"}},
    {"doc_id": "chk-alpha-patch2", "doc_type": "patch_release", "published_at": "2024-03-10", "version": "1.0.2",
     "text": "qzalpha release notes complete the parser fix for good",
     "scope": {"package": "qzalphapkg", "cve_id": "CVE-2097-0001"}},
    {"doc_id": "chk-beta-disclosure", "doc_type": "vulnerability_disclosure", "published_at": "2024-01-05",
     "text": "qzbeta request forgery in the client", "scope": {"package": "qzbetapkg", "cve_id": "CVE-2097-0002"},
     "tenant": "acme", "allowed_principals": ["sec"]},
    {"doc_id": "chk-beta-patch", "doc_type": "patch_release", "published_at": "2024-02-05", "version": "2.0.0",
     "text": "qzbeta release closes the forgery", "scope": {"package": "qzbetapkg", "cve_id": "CVE-2097-0002"}},
    {"doc_id": "chk-gamma-advisory", "doc_type": "note", "text": "qzgamma advisory on the configuration loader"},
    {"doc_id": "chk-gamma-erratum", "doc_type": "note", "text": "qzgamma erratum replaces the advisory",
     "supersedes": ["chk-gamma-advisory"]},
    {"doc_id": "chk-holder", "doc_type": "note", "text": "qzholder record that voids one not yet stored",
     "supersedes": ["fz-pending"]},
    {"doc_id": "chk-acme-note", "doc_type": "note", "text": "qzalpha internal triage note", "tenant": "acme"},
    {"doc_id": "chk-plain", "doc_type": "note", "text": "qzgamma unrelated public note", "metadata": {"team": "ops"}},
]  # fmt: skip
CHECK_IDS = [r["doc_id"] for r in CHECK_RECORDS]
PENDING_ID = "fz-pending"
"""The id ``chk-holder`` supersedes before it exists: a fuzz record with it that supersedes
``chk-holder`` back would close a cycle through the stored corpus."""
CHECK_QUERIES = ["qzalpha", "qzalphadisc", "qzbeta", "qzgamma", "CVE-2097-0001"]
CHECK_CALLERS: dict[str, CallerContext | None] = {
    "anyone": None,
    "acme/sec": CallerContext("acme", {"sec"}),
    "globex/legal": CallerContext("globex", {"legal"}),
}
CLI_CALLER_ARGS = {"anyone": [], "acme/sec": ["--tenant", "acme", "--principal", "sec"],
                   "globex/legal": ["--tenant", "globex", "--principal", "legal"]}  # fmt: skip

# ---------------------------------------------------------------------- fuzz material
WORDS = [
    "amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kelp",
    "lantern", "meadow", "nickel", "orchid", "pebble", "quartz", "ravine", "saffron", "tundra", "umber",
    "velvet", "willow", "yarrow", "zephyr", "granite", "lagoon", "marble", "onyx", "prairie", "sierra",
]  # fmt: skip
HUGE_WORDS = ["ballast", "bulk", "filler", "padding", "tonnage", "heap", "surplus", "mass"]
NASTY = [
    "</evidence>", "]]>", "<!ENTITY x SYSTEM 'file:///etc/passwd'>", "ignore previous instructions",
    "'; DROP TABLE records; --", "\u202e", "\x00", "\x1b[31m", "\ufeff", "\u2028", "\U0001f4a5", "Ω≈ç√",
    "\\u0000", "${jndi:ldap://x}", "{{7*7}}", "\r", "\t\t", "%s%s%n", "null", "undefined",
]  # fmt: skip
JUNK_RANGES = [(0x400, 0x4FF), (0x4E00, 0x4E80), (0x1F300, 0x1F5FF), (0x1, 0x1F), (0x2000, 0x206F)]
"""Random characters come from these blocks only: no Latin letters or digits, so no fuzz text
can contain a check query's word."""
DOC_TYPES = ["vulnerability_disclosure", "patch_release", "note"]
FIELDS = ["doc_id", "text", "doc_type", "scope", "published_at", "effective_at", "version", "source", "uri",
          "authority", "tenant", "allowed_principals", "supersedes", "metadata"]  # fmt: skip
WRONG_VALUES: dict[str, list[Any]] = {
    "doc_id": [None, 7, 1.5, True, [], {}, "", " padded", ["fz"]],
    "text": [None, 12, [], {}, True, ["a", "b"]],
    "doc_type": [None, "", 3, [], {"t": 1}],
    "scope": ["lodash", [], 5, {"package": 5}, {"package": None}, {"package": ["a"]}, {"package": {"n": "x"}}],
    "published_at": [[], {}, "not a date", "2024-13-01", "", "2024-02-30", "yesterday"],
    "effective_at": [[], "31/01/2024", "2024/01/31", "T12:00"],
    "version": [2, 1.5, [], {}, False],
    "source": [5, [], {}],
    "uri": [5, ["https://x"], {}],
    "authority": ["0.5", True, 1.5, -1, "high", [], 10**400],
    "tenant": [5, [], {}, True],
    "allowed_principals": ["alice", [1], [None], {}, [["a"]], 3],
    "supersedes": ["b", [1], {}, [None], 7],
    "metadata": [[], "x", 5, None, True],
}
TYPOS = ["supercedes", "publishedAt", "Scope", "doc-id", "tenant ", "allowed_principal", "meta", "effective",
         "docType", "scopes", "__proto__", "constructor", ""]  # fmt: skip
BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xe2\x82"]
BOM = b"\xef\xbb\xbf"


def fuzz_text(rng: random.Random, words: tuple[int, int] = (3, 12)) -> str:
    parts = [rng.choice(WORDS) for _ in range(rng.randint(*words))]
    if rng.random() < 0.3:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(NASTY))
    if rng.random() < 0.2:
        lo, hi = rng.choice(JUNK_RANGES)
        parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
    return " ".join(parts)


def huge_text(rng: random.Random, size: int) -> str:
    """``size`` characters of words no other fuzz text uses, so that the huge records (which BM25
    ranks first for any word they hold) stay out of the other records' probes."""
    block = " ".join(rng.choice(HUGE_WORDS) for _ in range(2000)) + " "
    return (block * (size // len(block) + 1))[:size]


def fuzz_date(rng: random.Random) -> str:
    day = datetime(2020, 1, 1, tzinfo=UTC).timestamp() + rng.randrange(6 * 365) * 86400
    when = datetime.fromtimestamp(day, UTC)
    return rng.choice([when.date().isoformat(), when.isoformat(), when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       when.strftime("%Y-%m-%dT%H:%M:%S+05:30")])  # fmt: skip


def fuzz_record(rng: random.Random, doc_id: str) -> dict[str, Any]:
    """A valid record: never in a check record's scope, never naming a check record."""
    record: dict[str, Any] = {"doc_id": doc_id, "text": fuzz_text(rng), "doc_type": rng.choice(DOC_TYPES)}
    if rng.random() < 0.8:
        record["scope"] = {"package": f"fz{rng.choice(WORDS)}", "cve_id": f"CVE-2098-{rng.randint(10000, 10030)}"}
    if rng.random() < 0.7:
        record["published_at"] = fuzz_date(rng)
    if rng.random() < 0.3:
        record["version"] = f"{rng.randint(0, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 30)}"
    if rng.random() < 0.2:
        record["authority"] = round(rng.random(), 2)
    if rng.random() < 0.3:
        record["tenant"] = rng.choice(["acme", "globex", "fuzz"])
    if rng.random() < 0.2:
        record["allowed_principals"] = rng.sample(["sec", "legal", "ops", "*"], rng.randint(1, 2))
    if rng.random() < 0.2:
        record["metadata"] = {"tags": [rng.choice(WORDS)], "score": rng.random(), "nested": {"ok": True}}
    return record


# ---------------------------------------------------------------------- cases
@dataclass
class Line:
    """One physical line of a case's corpus file and what must become of it."""

    payload: bytes
    expect: str  # "ok": stored; "reject": reported; "any": either, if clearly
    field: str | None = None  # a rejection must name this field (or one under it)
    item: Any = None  # the same line as a Python object, for the API's list input
    listable: bool = True  # whether ``item`` says the same as ``payload``


def _line(obj: Any, expect: str, field: str | None = None, *, ascii_only: bool = True) -> Line:
    text = json.dumps(obj, ensure_ascii=ascii_only)
    return Line(text.encode("utf-8", "surrogatepass"), expect, field, obj, listable=True)


def _raw(payload: bytes, expect: str, field: str | None = None) -> Line:
    return Line(payload, expect, field, None, listable=False)


@dataclass
class Case:
    number: int
    kind: str  # "records" or "policy"
    category: str
    what: str
    lines: list[Line] = field(default_factory=list)
    as_items: bool = False  # records: given to the API as decoded items, not as a file
    items: list[Any] | None = None  # records: Python objects that have no JSON form
    policy: bytes = b""
    suffix: str = ".toml"
    expect: str = "ok"  # policy: "ok", "reject" or "any"
    field: str | None = None  # policy: a rejection must name this field

    def corpus_bytes(self) -> bytes:
        return b"\n".join(line.payload for line in self.lines) + b"\n"


def _records_wrong_types(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    name = rng.choice(FIELDS)
    value = rng.choice(WRONG_VALUES[name])
    record = {**fuzz_record(rng, ids()), name: value}
    if name == "doc_id" and value == " padded":
        record["doc_id"] = f" {ids()}"
    return f"{name}={str(value)[:20]!r}", [_line(record, "reject", name)]


def _records_huge(rng: random.Random, ids: Callable[[], str], five_mb: bool) -> tuple[str, list[Line]]:
    record = fuzz_record(rng, ids())
    record["scope"] = {"package": "fzhuge", "cve_id": f"CVE-2098-{50_000 + int(record['doc_id'].split('-')[1])}"}
    where = "text" if five_mb else rng.choice(["text", "text", "doc_id", "scope", "metadata", "version", "supersedes"])
    size = 5_000_000 if five_mb else rng.choice([65_536, 262_144, 1_048_576]) if where == "text" else rng.choice([4_096, 65_536])
    big = huge_text(rng, size)
    if where == "text":
        record["text"] = big
    elif where == "doc_id":
        record["doc_id"] = f"fz-huge-{ids()}-" + big.replace(" ", "-")
    elif where == "scope":
        record["scope"]["package"] = big
    elif where == "metadata":
        record["metadata"] = {"blob": big, "many": list(range(size // 16))}
    elif where == "version":
        record["version"] = big
    else:
        record["supersedes"] = [f"fz-none-{i}" for i in range(size // 16)]
    return f"{where} of {size:,} characters", [_line(record, "ok")]


def _records_deep(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    from car_rag.records import METADATA_DEPTH

    depth = rng.choice([5, METADATA_DEPTH - 2, METADATA_DEPTH - 1, METADATA_DEPTH, 150, 250, 900, 100_000])
    shape = rng.choice(["metadata", "scope", "line"])
    if shape == "line":
        payload = (b"[" * depth + b"]" * depth) if rng.random() < 0.5 else (b'{"a":' * depth + b"1" + b"}" * depth)
        return f"a JSON line nested {depth} deep", [_raw(payload, "reject")]
    if depth > 900:
        depth = 900
    nested: Any = "leaf"
    for _ in range(depth - 1):
        nested = [nested] if rng.random() < 0.5 else {"k": nested}
    record = fuzz_record(rng, ids())
    if shape == "scope":
        record["scope"] = {"package": nested}
        return f"scope value nested {depth} deep", [_line(record, "reject", "scope")]
    record["metadata"] = {"m": nested}  # the metadata dict is one level, "m" the next
    expect = "ok" if depth + 1 <= METADATA_DEPTH else "reject"
    return f"metadata nested {depth + 1} deep", [_line(record, expect, "metadata")]


def _records_invalid_utf8(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    record = fuzz_record(rng, ids())
    if rng.random() < 0.3:  # valid JSON escapes of a lone surrogate: not valid Unicode
        target = rng.choice(["text", "doc_type", "tenant", "scope"])
        surrogate = chr(rng.choice([0xD800, 0xDBFF, 0xDC00, 0xDFFF]))
        if target == "scope":
            record["scope"] = {"package": f"fz{surrogate}"}
        else:
            record[target] = f"x{surrogate}y"
        return f"lone surrogate in {target}", [_line(record, "reject", target)]
    payload = json.dumps(record).encode()
    at = rng.randrange(len(payload) + 1)
    bad = rng.choice(BAD_UTF8)
    return f"bytes {bad!r} at {at}", [_raw(payload[:at] + bad + payload[at:], "reject")]


def _records_bom(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    record = fuzz_record(rng, ids())
    payload = json.dumps(record).encode()
    where = rng.choice(["start", "inside text", "between tokens", "utf-16"])
    if where == "start":
        return "BOM before the line", [_raw(BOM + payload, "ok")]
    if where == "inside text":
        record["text"] = "\ufeff" + record["text"]
        return "BOM inside the text", [_line(record, "ok", ascii_only=False)]
    if where == "between tokens":
        return "BOM between JSON tokens", [_raw(payload.replace(b", ", b"," + BOM + b" ", 1), "reject")]
    utf16 = json.dumps({**record, "text": " ".join(WORDS[:5])}).encode("utf-16")
    return "a UTF-16 line", [_raw(utf16, "reject")]


def _records_duplicates(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    what = rng.choice(["id twice", "stored id unchanged", "stored id broken", "key twice", "id twice, second differs"])
    if what in ("id twice", "id twice, second differs"):
        first = fuzz_record(rng, ids())
        second = dict(first) if what == "id twice" else {**fuzz_record(rng, first["doc_id"])}
        return what, [_line(first, "ok"), _line(second, "reject", "doc_id")]
    if what == "stored id unchanged":
        return what, [_line(dict(rng.choice(CHECK_RECORDS)), "ok")]
    if what == "stored id broken":
        stored = rng.choice(CHECK_RECORDS)
        name = rng.choice(["published_at", "tenant", "scope", "doc_type"])
        broken = {"published_at": 2024, "tenant": "*", "scope": {"package": ""}, "doc_type": ""}[name]
        return f"{what} ({name})", [_line({**stored, name: broken}, "reject", name)]
    record = {"supersedes": [f"fz-none-{ids()}"], "scope": {"package": "fzkey"}, **fuzz_record(rng, ids())}
    key = rng.choice(["supersedes", "doc_id", "scope", "text"])
    body = json.dumps(record)[1:-1]
    payload = f'{{"{key}": {json.dumps(record[key])}, {body}}}'.encode()
    return f"key {key!r} twice", [_raw(payload, "reject")]


def _records_cycles(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    what = rng.choice(["two", "three", "self", "through a stored record", "explicit against a rule"])
    if what == "two":
        a, b = ids(), ids()
        return what, [_line({**fuzz_record(rng, a), "supersedes": [b]}, "ok"),
                      _line({**fuzz_record(rng, b), "supersedes": [a]}, "reject", "supersedes")]  # fmt: skip
    if what == "three":
        a, b, c = ids(), ids(), ids()
        return what, [_line({**fuzz_record(rng, a), "supersedes": [b]}, "ok"),
                      _line({**fuzz_record(rng, b), "supersedes": [c]}, "ok"),
                      _line({**fuzz_record(rng, c), "supersedes": [a]}, "reject", "supersedes")]  # fmt: skip
    if what == "self":
        a = ids()
        return what, [_line({**fuzz_record(rng, a), "supersedes": [ids(), a]}, "reject", "supersedes")]
    if what == "through a stored record":
        return what, [_line({**fuzz_record(rng, PENDING_ID), "supersedes": ["chk-holder"]}, "reject", "supersedes")]
    # a later patch voids an earlier one by rule; the earlier one claiming the later is a cycle
    scope = {"package": f"fz{rng.choice(WORDS)}", "cve_id": f"CVE-2098-{rng.randint(20000, 29999)}"}
    early, late = ids(), ids()
    base = {"doc_type": "patch_release", "text": fuzz_text(rng), "scope": scope}
    return what, [_line({**base, "doc_id": early, "published_at": "2024-01-01", "supersedes": [late]}, "ok"),
                  _line({**base, "doc_id": late, "published_at": "2024-06-01"}, "reject", "supersedes")]  # fmt: skip


def _records_unknown_fields(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    typo = rng.choice(TYPOS)
    return f"field {typo!r}", [_line({**fuzz_record(rng, ids()), typo: rng.choice([["x"], "x", 1, None])}, "reject", typo)]


def _records_scope(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    record = fuzz_record(rng, ids())
    key, value, expect = rng.choice([
        ("package", "", "reject"), ("package", "   ", "reject"), ("package", "\t\n", "reject"), ("", "x", "reject"),
        (" ", "x", "reject"), ("car_tenant", "x", "reject"), ("tenant", "acme", "reject"), ("doc_id", "x", "reject"),
        ("#x", "a", "reject"), ("$where", "a", "reject"), ("chroma:document", "a", "reject"),
        ("chroma:x", "a", "ok"), ("x.y", "a", "ok"), ("\u00e9", "\u00e9", "ok"), ("package", "\u3000", "reject"),
    ])  # fmt: skip
    record["scope"] = {**record.get("scope", {}), key: value}
    return f"scope {{{key!r}: {value!r}}}", [_line(record, expect, "scope")]


def _records_dates(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    name = rng.choice(["published_at", "effective_at"])
    value, expect = rng.choice([
        (2024, "reject"), (2024.5, "reject"), (0, "reject"), (10**400, "reject"), (-1, "reject"), (1_700_000_000, "reject"),
        (True, "reject"),
        ("2024", "reject"), ("20240131", "reject"), ("1700000000", "reject"), ("-5", "reject"), ("1.5", "reject"),
        ("2024-01-31", "ok"), ("2024-01-31T12:00:00Z", "ok"), ("2024-01-31T12:00:00+05:30", "ok"),
        ("0001-01-01T00:00:00+01:00", "ok"), ("9999-12-31T23:59:59-23:59", "ok"),
    ])  # fmt: skip
    return f"{name}={value!r}", [_line({**fuzz_record(rng, ids()), name: value}, expect, name)]


def _records_tenant(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    name, value, expect = rng.choice([
        ("tenant", "*", "reject"), ("tenant", "", "reject"), ("tenant", " ", "reject"),
        ("allowed_principals", [""], "reject"), ("allowed_principals", ["sec", " "], "reject"),
        ("allowed_principals", ["*"], "ok"), ("tenant", "**", "ok"), ("tenant", None, "ok"),
    ])  # fmt: skip
    return f"{name}={value!r}", [_line({**fuzz_record(rng, ids()), name: value}, expect, name)]


def _records_not_objects(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    if rng.random() < 0.5:
        value = rng.choice([[1, 2], "record", 5, None, True, [fuzz_record(rng, ids())]])
        return f"JSON {type(value).__name__}", [_line(value, "reject")]
    payload = json.dumps(fuzz_record(rng, ids())).encode()
    how = rng.choice(["truncated", "trailing comma", "single quotes", "comment", "NaN text", "huge integer"])
    bad = {
        "truncated": payload[: rng.randrange(1, len(payload) - 1)],
        "trailing comma": payload[:-1] + b",}",
        "single quotes": payload.replace(b'"', b"'"),
        "comment": payload + b" // note",
        "NaN text": payload[:-1] + b', "metadata": {"x": NaN}}',
        "huge integer": payload[:-1] + b', "metadata": {"x": ' + b"9" * 5000 + b"}}",
    }[how]
    return how, [_raw(bad, "reject")]


def _records_valid(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[Line]]:
    n = rng.randint(1, 3)
    return f"{n} valid", [_line(fuzz_record(rng, ids()), "ok", ascii_only=rng.random() < 0.5) for _ in range(n)]


def _python_items(rng: random.Random, ids: Callable[[], str]) -> tuple[str, list[tuple[Any, str, str | None]]]:
    """Items that only the Python API can be handed: (item, expect, field)."""
    record = fuzz_record(rng, ids())
    what, item, expect, name = rng.choice([
        ("bytes text", {**record, "text": b"bytes"}, "reject", "text"),
        ("datetime in metadata", {**record, "metadata": {"when": datetime(2024, 1, 1)}}, "reject", "metadata"),
        ("set in metadata", {**record, "metadata": {"s": {1, 2}}}, "reject", "metadata"),
        ("int key in metadata", {**record, "metadata": {1: "x"}}, "reject", "metadata"),
        ("NaN authority", {**record, "authority": float("nan")}, "reject", "authority"),
        ("NaN in metadata", {**record, "metadata": {"x": float("nan")}}, "reject", "metadata"),
        ("aware datetime", {**record, "published_at": datetime(2024, 1, 1, tzinfo=UTC)}, "ok", None),
        ("Record object", Record.model_validate(record), "ok", None),
        ("None item", None, "reject", None),
        ("surrogate doc_id", {**record, "doc_id": "fz-\ud800"}, "reject", "doc_id"),
        ("tuple supersedes", {**record, "supersedes": ("fz-none",)}, "any", None),
    ])  # fmt: skip
    return what, [(item, expect, name)]


RECORD_CATEGORIES: dict[str, Callable[..., tuple[str, list[Line]]]] = {
    "wrong_types": _records_wrong_types,
    "huge_values": _records_huge,
    "deep_nesting": _records_deep,
    "invalid_utf8": _records_invalid_utf8,
    "bom": _records_bom,
    "duplicates": _records_duplicates,
    "cycles": _records_cycles,
    "unknown_fields": _records_unknown_fields,
    "scope_keys_values": _records_scope,
    "numeric_dates": _records_dates,
    "reserved_tenant": _records_tenant,
    "not_json_objects": _records_not_objects,
    "valid": _records_valid,
}
RECORD_WEIGHTS = {"huge_values": 2, "valid": 4, "python_objects": 3}


# ---------------------------------------------------------------------- policies
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


def to_toml(data: dict[str, Any]) -> str:
    """TOML for the policies generated here (inline tables throughout)."""
    return "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in data.items())


def fuzz_policy(rng: random.Random, number: int) -> dict[str, Any]:
    keys = rng.sample(["package", "cve_id", "document", "site", "ticker", "employee"], rng.randint(1, 3))
    rules = [{"name": "fix", "trigger": "patch", "target": "disclosure", "within": keys[:1]}]
    if rng.random() < 0.5:
        rules.append(
            {
                "name": "newer",
                "trigger": "patch",
                "target": "patch",
                "within": keys,
                "order": rng.choice(["later", "higher_version"]),
            }
        )
    policy: dict[str, Any] = {"name": f"fz-policy-{number}", "scope_keys": keys, "rules": rules}
    if rng.random() < 0.5:
        policy["scope_patterns"] = {keys[0]: r"\b(FZ-\d+)\b"}
        policy["case_insensitive_keys"] = [keys[0]]
    if rng.random() < 0.3:
        policy["vocabulary"] = ["security"]
    if rng.random() < 0.3:
        policy["states"] = {"fixed": {"doc_types": ["fixnote"], "terms": [r"fixed|resolved"], "claims": [r"\bis fixed\b"]}}
    return policy


BAD_REGEXES = ["(", "[a-", "a{4294967296}", "(" * 3000 + ")" * 3000, "(?P<1>x)", "\\", "*x", "(?<=a+)b", "x{2,1}"]


def _policy_mutation(rng: random.Random, policy: dict[str, Any]) -> tuple[str, str, str | None]:
    """Break ``policy`` in place one way; returns (what, expect, field)."""
    what = rng.choice([
        "valid", "rules empty", "rules missing", "unknown field", "unknown rule field", "bad scope regex",
        "bad state regex", "inline flag in a term", "rule names unknown key", "duplicate rule names",
        "symmetric rule without order", "wrong type", "duplicate scope keys", "blank scope key",
        "case-insensitive key unknown", "pattern for unknown key", "unknown vocabulary", "states not a table",
        "unknown opposite state", "no scope keys",
    ])  # fmt: skip
    rules = policy["rules"]
    if what == "valid":
        return what, "ok", None
    if what == "rules empty":
        policy["rules"] = []
        return what, "ok", None
    if what == "rules missing":
        del policy["rules"]
        return what, "reject", "rules"
    if what == "unknown field":
        name = rng.choice(["scope_key", "rule", "Rules", "policy", "name ", "order"])
        policy[name] = "x"
        return f"{what} {name!r}", "reject", name
    if what == "unknown rule field":
        rules[0][rng.choice(["within_keys", "when", "Order", "priority"])] = "x"
        return what, "reject", "rules"
    if what == "bad scope regex":
        pattern = rng.choice(BAD_REGEXES)
        policy["scope_patterns"] = {policy["scope_keys"][0]: pattern}
        return f"{what} {pattern[:12]!r}", "reject", "scope_patterns"
    if what in ("bad state regex", "inline flag in a term"):
        pattern = rng.choice(BAD_REGEXES) if what == "bad state regex" else "(?i)fixed"
        kind = "claims" if what == "bad state regex" and rng.random() < 0.5 else "terms"
        policy["states"] = {"fixed": {"doc_types": ["fixnote"], kind: [pattern]}}
        return f"{what} {pattern[:12]!r}", "reject", "states"
    if what == "rule names unknown key":
        rules[0]["within"] = [*rules[0]["within"], "zzz"]
        return what, "reject", "rules"
    if what == "duplicate rule names":
        rules.append({**rules[0], "target": "advisory"})
        return what, "reject", "rules"
    if what == "symmetric rule without order":
        rules.append({"name": "loop", "trigger": rng.choice(["patch", "*"]), "target": "patch", "order": "any"})
        return what, "reject", "rules"
    if what == "wrong type":
        name, value = rng.choice([("name", 5), ("scope_keys", "package"), ("rules", {"a": 1}), ("description", []),
                                  ("scope_patterns", ["x"]), ("rules", "none")])  # fmt: skip
        policy[name] = value
        return f"{what} {name}", "reject", name
    if what == "duplicate scope keys":
        policy["scope_keys"] = [*policy["scope_keys"], policy["scope_keys"][0]]
        return what, "reject", "scope_keys"
    if what == "blank scope key":
        policy["scope_keys"] = [*policy["scope_keys"], rng.choice(["", " ", "\t"])]
        return what, "reject", "scope_keys"
    if what == "case-insensitive key unknown":
        policy["case_insensitive_keys"] = ["zzz"]
        return what, "reject", "case_insensitive_keys"
    if what == "pattern for unknown key":
        policy["scope_patterns"] = {"zzz": "x"}
        return what, "reject", "scope_patterns"
    if what == "unknown vocabulary":
        policy["vocabulary"] = [rng.choice(["nope", "../etc/passwd", ""])]
        return what, "reject", "vocabulary"
    if what == "states not a table":
        policy["vocabulary"] = ["security"]
        policy["states"] = rng.choice([[1], "x", 5])
        return what, "reject", "states"
    if what == "unknown opposite state":
        policy["states"] = {"fixed": {"doc_types": ["fixnote"], "opposite": "broken"}}
        return what, "reject", "states"
    policy["scope_keys"] = []
    return what, "reject", "scope_keys"


def _policy_bytes(rng: random.Random, number: int) -> tuple[str, bytes, str, str, str | None]:
    """(what, file bytes, suffix, expect, field) for one policy case."""
    policy = fuzz_policy(rng, number)
    suffix = rng.choice([".toml", ".json"])
    form = rng.random()
    if form < 0.7:
        what, expect, name = _policy_mutation(rng, policy)
        text = json.dumps(policy, ensure_ascii=False) if suffix == ".json" else to_toml(policy)
        return what, text.encode(), suffix, expect, name
    text = json.dumps(policy) if suffix == ".json" else to_toml(policy)
    data = text.encode()
    how = rng.choice(["truncated", "garbage", "invalid UTF-8", "BOM", "deeply nested", "huge integer", "empty",
                      "not an object", "duplicate key", "wrong suffix"])  # fmt: skip
    if how == "truncated":
        return how, data[: rng.randrange(len(data))], suffix, "reject" if suffix == ".json" else "any", None
    if how == "garbage":
        at = rng.randrange(len(data) + 1)
        return how, data[:at] + rng.choice([b"\x00", b"}{", b"[[", b"= =", b'"""', b"\\"]) + data[at:], suffix, "any", None
    if how == "invalid UTF-8":
        at = rng.randrange(len(data) + 1)
        return how, data[:at] + rng.choice(BAD_UTF8) + data[at:], suffix, "reject", None
    if how == "BOM":
        return how, BOM + data, suffix, "ok", None
    if how == "deeply nested":
        depth = rng.choice([500, 100_000])
        nested = "[" * depth + "]" * depth
        body = (
            f'{{"name": "x", "scope_keys": ["a"], "rules": [], "description": {nested}}}'
            if suffix == ".json"
            else f'name = "x"\nscope_keys = ["a"]\nrules = []\ndescription = {nested}\n'
        )
        return f"{how} {depth}", body.encode(), suffix, "reject", None
    if how == "huge integer":  # more digits than Python converts
        digits = b"9" * 5000
        huge = b'{"x": ' + digits + b", " + data[1:] if suffix == ".json" else b"x = " + digits + b"\n" + data
        return how, huge, suffix, "reject", None
    if how == "empty":
        return how, b"", suffix, "reject", None
    if how == "not an object":
        return how, rng.choice([b"[1]", b'"policy"', b"null", b"5"]), ".json", "reject", None
    if how == "duplicate key":
        body = f'name = "a"\n{text}' if suffix == ".toml" else '{"name": "a", ' + text[1:]
        return how, body.encode(), suffix, "reject" if suffix == ".toml" else "ok", None  # JSON keeps the last
    return how, data, rng.choice([".yaml", ".txt", ""]), "reject", None


# ---------------------------------------------------------------------- building cases
def build_case(rng: random.Random, number: int, *, policy_share: float = 0.25, five_mb: bool = False) -> Case:
    """One seeded case (``five_mb``: a 5 MB text instead of a random category)."""
    counter = iter(range(1_000_000))

    def ids() -> str:
        return f"fz-{number}-{next(counter)}"

    if five_mb:
        what, lines = _records_huge(rng, ids, five_mb=True)
        return Case(number, "records", "huge_values", what, lines)
    if rng.random() < policy_share:
        what, data, suffix, expect, name = _policy_bytes(rng, number)
        return Case(number, "policy", "policy", what, policy=data, suffix=suffix, expect=expect, field=name)
    names = [*RECORD_CATEGORIES, "python_objects"]
    category = rng.choices(names, weights=[RECORD_WEIGHTS.get(n, 3) for n in names])[0]
    if category == "python_objects":
        what, triples = _python_items(rng, ids)
        case = Case(number, "records", category, what, items=[t[0] for t in triples])
        case.lines = [Line(b"", expect, name, item, listable=False) for item, expect, name in triples]
        return case
    generate = RECORD_CATEGORIES[category]
    what, lines = generate(rng, ids, five_mb=False) if category == "huge_values" else generate(rng, ids)
    if category != "valid" and rng.random() < 1 / 3:  # a valid neighbour must be stored regardless
        neighbour = _line(fuzz_record(rng, ids()), "ok")
        lines = [neighbour, *lines] if rng.random() < 0.5 else [*lines, neighbour]
    case = Case(number, "records", category, what, lines)
    case.as_items = all(line.listable for line in lines) and rng.random() < 0.2
    return case


# ---------------------------------------------------------------------- checking
@dataclass
class Violation:
    kind: str
    case: str
    detail: str

    def __post_init__(self) -> None:
        # Details quote hostile input: keep them short and writable (no lone surrogates).
        self.detail = self.detail[:600].encode("utf-8", "backslashreplace").decode("utf-8")

    def __str__(self) -> str:
        return f"[{self.kind}] {self.case}: {self.detail}"


@dataclass
class FuzzReport:
    cases: int
    seed: int
    cli_cases: int
    stats: Counter
    violations: list[Violation]
    seconds: float
    categories: dict[str, Counter] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


def snapshot(store: CARStore, retriever: ControllingAuthorityRetriever) -> dict[str, Any]:
    """What the check corpus looks like from outside: answers, records, edges, Chroma entries."""
    answers = {
        f"{query} as {label}": [(r.doc_id, r.status, r.hidden_superseder) for r in retriever.retrieve(query, caller=caller)]
        for query in CHECK_QUERIES
        for label, caller in CHECK_CALLERS.items()
    }
    records = {d: store.records[d].fingerprint() if d in store.records else None for d in CHECK_IDS}
    edges = sorted(
        (e.superseder, e.target, e.rule) for d in CHECK_IDS for e in store.graph.superseders(d) if e.superseder in CHECK_IDS
    )
    assert isinstance(store.dense, DenseChannel)  # the fuzzed stores keep their vectors in Chroma
    got = store.dense.collection.get(ids=CHECK_IDS, include=["metadatas", "documents"])
    chroma = sorted((i, doc, sorted(meta.items())) for i, doc, meta in zip(got["ids"], got["documents"], got["metadatas"]))
    return {"answers": answers, "records": records, "edges": edges, "chroma": chroma}


def _first_difference(before: dict[str, Any], after: dict[str, Any]) -> str:
    for part in before:
        if before[part] != after[part]:
            if isinstance(before[part], dict):
                key = next(k for k in before[part] if before[part][k] != after[part].get(k))
                return f"{part} {key!r}: {before[part][key]!r} -> {after[part].get(key)!r}"
            return f"{part} changed"
    return "no difference"


def _parsed(payload: bytes) -> Any:
    try:
        return json.loads(payload.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return None


def _field_named(error_field: str | None, wanted: str) -> bool:
    return error_field is not None and (error_field == wanted or error_field.startswith(wanted + "."))


class Fuzzer:
    """Runs cases against the API store (and the CLI store) and collects figures and violations."""

    def __init__(self, workdir: Path, embedder: Embedder, cli: bool):
        self.workdir = workdir
        self.embedder = embedder
        self.store = CARStore.open(workdir / "api-store", POLICY, embedder=embedder)
        report = self.store.ingest(CHECK_RECORDS, progress=False)
        if report.errors or len(report.added) != len(CHECK_RECORDS):
            raise RuntimeError(f"the check corpus did not ingest cleanly: {[str(e) for e in report.errors]}")
        self.retriever = ControllingAuthorityRetriever(self.store, anchors="bm25")
        self.baseline = snapshot(self.store, self.retriever)
        self.expected_len = len(self.store)
        self.stats: Counter = Counter()
        self.categories: dict[str, Counter] = {}
        self.violations: list[Violation] = []
        self.cli_store = workdir / "cli-store"
        if cli:
            with CARStore.open(self.cli_store, POLICY, embedder=embedder) as store:
                store.ingest(CHECK_RECORDS, progress=False)
        self.files = workdir / "cases"
        self.files.mkdir()

    def _violate(self, kind: str, case: Case, detail: str) -> None:
        self.violations.append(Violation(kind, f"case {case.number} {case.category}: {case.what}", detail))
        self.stats["cases_with_violations"] += 1

    def _count(self, case: Case, key: str, n: int = 1) -> None:
        self.categories.setdefault(case.category, Counter())[key] += n

    def run_case(self, case: Case, *, cli: bool) -> bool:
        """Run one case through the API (and the CLI when ``cli`` and it is a file case), then
        check the store; returns whether it went through the CLI."""
        self.stats[f"kind_{case.kind}"] += 1
        self._count(case, "cases")
        path = self.files / f"case-{case.number}{case.suffix if case.kind == 'policy' else '.jsonl'}"
        path.write_bytes(case.policy if case.kind == "policy" else case.corpus_bytes())
        try:
            if case.kind == "policy":
                self.run_policy(case, path)
                api_errors = None
            else:
                api_errors = self.run_records(case, path)
            self.check_store(case)
            cli &= case.kind == "policy" or (case.items is None and not case.as_items)
            if cli:
                self.run_cli(case, path, api_errors)
            return cli
        finally:
            path.unlink()

    # -------------------------------------------------------------- records
    def run_records(self, case: Case, path: Path) -> int | None:
        """Ingest through the API; returns how many errors it reported, None on a crash."""
        items = case.items if case.items is not None else [line.item for line in case.lines] if case.as_items else None
        source = items if items is not None else path
        self.stats["api_items" if items is not None else "api_files"] += 1
        try:
            report = self.store.ingest(source, progress=False)
        except Exception as exc:  # noqa: BLE001 - any escape is what the fuzz looks for
            self._count(case, "crashed")
            self._violate("crash", case, f"{type(exc).__name__}: {exc}")
            self.expected_len = len(self.store)
            return None
        label = str(path) if items is None else "<records>"
        stored = set(report.added) | set(report.updated)
        for error in report.errors:
            self.stats["record_errors"] += 1
            if error.line is None or not 1 <= error.line <= len(case.lines):
                self._violate("error without its line", case, str(error)[:300])
                continue
            if len(error.message) > MAX_MESSAGE:
                self._violate("error message too long", case, f"{len(error.message)} characters: {error.message[:200]}")
            if f"{label}:{error.line}:" not in str(error):
                self._violate("error does not name file and line", case, str(error)[:300])
            line = case.lines[error.line - 1]
            item = line.item if items is not None else _parsed(line.payload)
            doc_id = item.get("doc_id") if isinstance(item, dict) else item.doc_id if isinstance(item, Record) else None
            if isinstance(doc_id, str) and error.doc_id != doc_id:
                self._violate("error does not name the record", case, f"line {error.line}: {str(error)[:300]}")
            self.stats["record_errors_naming_a_record"] += error.doc_id is not None
            self.stats["record_errors_naming_a_field"] += error.field is not None
        for number, line in enumerate(case.lines, 1):
            errors = [e for e in report.errors if e.line == number]
            if line.expect == "reject" and not errors:
                self._violate("bad line accepted", case, f"line {number}: {line.payload[:160] or repr(line.item)[:160]!r}")
            elif line.expect == "ok" and errors:
                self._violate("good line rejected", case, f"line {number}: {errors[0]}")
            elif line.expect == "reject" and line.field and not any(_field_named(e.field, line.field) for e in errors):
                self._violate("error does not name the field", case, f"wanted {line.field!r}: {errors[0]}")
        rejected_lines = len({e.line for e in report.errors})
        self._count(case, "rejected_lines", rejected_lines)
        self._count(case, "stored_records", len(stored))
        self._count(case, "unchanged_records", report.unchanged)
        outcome = (
            "rejected"
            if rejected_lines and not (stored or report.unchanged)
            else "partly_rejected"
            if rejected_lines
            else "accepted"
        )
        self._count(case, outcome)
        self.expected_len += len(report.added)
        if stored:
            self._probe(case, min(stored))
        for doc_id in stored:
            record = self.store.get(doc_id)
            self.stats["largest_text"] = max(self.stats["largest_text"], len(record.text))
            try:
                problem = "" if Record.model_validate_json(record.model_dump_json()) == record else "reads back different"
            except Exception as exc:  # noqa: BLE001
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                self._violate("stored record does not read back", case, f"{doc_id[:80]}: {problem}")
        return len(report.errors)

    def _probe(self, case: Case, doc_id: str) -> None:
        """A stored record must be usable: a query for its CVE id and first words, the top 5
        rendered for a reader."""
        record = self.store.get(doc_id)
        query = " ".join([record.scope.get("cve_id", ""), *record.text.split()[:4]]).strip() or "fuzz probe"
        try:
            result = self.retriever.retrieve(query)
            render_audit(result, policy=self.store.policy, k=5)
            json.dumps(result.to_dict(), ensure_ascii=False)
        except Exception as exc:  # noqa: BLE001
            self._violate("query of a stored record crashed", case, f"{doc_id[:80]}: {type(exc).__name__}: {exc}")
            return
        self.stats["stored_records_probed"] += 1
        self.stats["probes_returning_the_record"] += doc_id in result.doc_ids()

    # -------------------------------------------------------------- policies
    def run_policy(self, case: Case, path: Path) -> bool:
        """Load through the API; True when it loaded."""
        try:
            policy = load_policy(path)
        except PolicyError as exc:
            self.stats["policy_errors"] += 1
            self._count(case, "rejected")
            message = str(exc)
            if case.expect == "ok":
                self._violate("good policy rejected", case, message[:300])
            if not message.startswith(str(path)) and path.suffix in (".toml", ".json"):
                self._violate("policy error does not name the file", case, message[:300])
            if case.field and case.field not in message:
                self._violate("policy error does not name the field", case, f"wanted {case.field!r}: {message[:300]}")
            if len(message) > MAX_MESSAGE + len(str(path)) + 200:
                self._violate("policy error too long", case, f"{len(message)} characters")
            return False
        except Exception as exc:  # noqa: BLE001
            self._count(case, "crashed")
            self._violate("crash", case, f"load_policy: {type(exc).__name__}: {exc}")
            return False
        self._count(case, "accepted")
        if case.expect == "reject":
            self._violate("bad policy accepted", case, repr(case.policy[:160]))
        try:  # a store built with another policy must refuse it and stay as it was
            CARStore.open(self.store.path, policy, embedder=self.embedder)
        except StoreError as exc:
            if "resolves differently" not in str(exc):
                self._violate("unexpected store error", case, str(exc)[:300])
        except Exception as exc:  # noqa: BLE001
            self._violate("crash", case, f"CARStore.open: {type(exc).__name__}: {exc}")
        else:
            self._violate("store reopened with another policy", case, policy.name)
        return True

    # -------------------------------------------------------------- integrity
    def check_store(self, case: Case) -> None:
        self.stats["integrity_checks"] += 1
        try:
            now = snapshot(self.store, self.retriever)
        except Exception as exc:  # noqa: BLE001
            self._violate("check queries crashed", case, f"{type(exc).__name__}: {exc}")
            return
        if now != self.baseline:
            self._violate("check store changed", case, _first_difference(self.baseline, now))
            self.baseline = now  # report each change once
        if len(self.store) != self.expected_len:
            self._violate("check store lost or gained records", case, f"{len(self.store)} held, {self.expected_len} expected")
            self.expected_len = len(self.store)

    def reopen(self) -> None:
        """Close the API store, open it from disk and check it answers as before."""
        held = len(self.store)
        self.store.close()
        try:
            self.store = CARStore.open(self.workdir / "api-store", embedder=self.embedder)
        except Exception as exc:  # noqa: BLE001
            self.violations.append(Violation("store does not reopen", "end of run", f"{type(exc).__name__}: {exc}"))
            return
        self.retriever = ControllingAuthorityRetriever(self.store, anchors="bm25")
        now = snapshot(self.store, self.retriever)
        self.stats["reopened_records"] = len(self.store)
        if now != self.baseline or len(self.store) != held:
            detail = _first_difference(self.baseline, now) if now != self.baseline else f"{len(self.store)} of {held} records"
            self.violations.append(Violation("reopened store differs", "end of run", detail))

    # -------------------------------------------------------------- CLI
    def run_cli(self, case: Case, path: Path, api_errors: int | None) -> None:
        command = _car_rag()
        if case.kind == "records":
            args = ["ingest", str(path), "--store", str(self.cli_store), "--quiet"]
        else:
            tiny = self.files / "check.jsonl"
            tiny.write_text(json.dumps(CHECK_RECORDS[0]) + "\n", encoding="utf-8")
            args = ["ingest", str(tiny), "--store", str(self.cli_store), "--policy", str(path), "--quiet"]
        try:
            done = subprocess.run([*command, *args], capture_output=True, text=True, errors="replace", timeout=600)
        except subprocess.TimeoutExpired:
            self._violate("CLI timed out", case, " ".join(args))
            return
        self.stats["cli_cases"] += 1
        self.stats[f"cli_exit_{done.returncode}"] += 1
        self._count(case, "cli_cases")
        self._count(case, f"cli_exit_{done.returncode}")
        if "Traceback" in done.stderr:
            self.stats["cli_tracebacks"] += 1
            self._violate("CLI traceback", case, done.stderr[-500:])
        if case.kind == "policy":
            if done.returncode != 1 or not done.stderr.startswith("car-rag ingest: error: "):
                self._violate("CLI policy error", case, f"exit {done.returncode}: {done.stderr[:300]}")
            return
        rejected = [line for line in done.stderr.splitlines() if line.startswith("rejected: ")]
        wanted = 1 if rejected else 0
        if done.returncode != wanted or (api_errors is not None and len(rejected) != api_errors):
            self._violate(
                "CLI outcome",
                case,
                f"exit {done.returncode}, {len(rejected)} rejected lines, API {api_errors}: {done.stderr[-300:]}",
            )
        for line in rejected:
            if not line.startswith(f"rejected: {path}:"):
                self._violate("CLI error does not name file and line", case, line[:300])
        for number, sent in enumerate(case.lines, 1):
            named = any(r.startswith(f"rejected: {path}:{number}:") for r in rejected)
            if (sent.expect == "reject") != named and sent.expect != "any":
                self._violate(
                    "CLI line outcome", case, f"line {number} expected {sent.expect}, {'named' if named else 'not named'}"
                )

    def query_cli_store(self) -> None:
        """``car-rag query`` on the CLI store must answer the check queries as the baseline does."""
        queries = self.files / "check-queries.jsonl"
        queries.write_text("".join(json.dumps({"query_id": f"q{i}", "query": q}) + "\n" for i, q in enumerate(CHECK_QUERIES)))
        for n, (label, extra) in enumerate(CLI_CALLER_ARGS.items()):
            out = self.files / f"answers-{n}.jsonl"
            args = ["query", "--store", str(self.cli_store), "--queries", str(queries), "--anchors", "bm25", "--k", "100",
                    "--out", str(out), *extra]  # fmt: skip
            done = subprocess.run([*_car_rag(), *args], capture_output=True, text=True, errors="replace", timeout=600)
            if done.returncode != 0:
                self.violations.append(Violation("CLI query failed", "end of run", done.stderr[-500:]))
                continue
            for query, line in zip(CHECK_QUERIES, out.read_text(encoding="utf-8").splitlines()):
                got = [(r["doc_id"], r["status"]) for r in json.loads(line)["records"]]
                want = [(d, s) for d, s, _ in self.baseline["answers"][f"{query} as {label}"]]
                if got != want:
                    self.violations.append(Violation("CLI store answers differ", f"{query} as {label}", f"{want} -> {got}"))
            self.stats["cli_check_queries"] += len(CHECK_QUERIES)


def _car_rag() -> list[str]:
    script = Path(sys.executable).with_name("car-rag")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "car_rag"]


def run_fuzz(
    cases: int = 10_000,
    seed: int = 20240611,
    *,
    cli_cases: int = 120,
    embedder: Embedder | None = None,
    workdir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> FuzzReport:
    """Run ``cases`` seeded cases through the API; every (cases / cli_cases)-th file case also
    through ``car-rag ingest``. One case in 2,500 is a 5 MB text."""
    if cases < 1 or cli_cases < 0:
        raise ValueError("need cases >= 1 and cli_cases >= 0")
    started = time.perf_counter()
    embedder = embedder or Embedder()
    embedder.model  # noqa: B018 - load once, before the clock of any case
    rng = random.Random(seed)
    five_mb = {int(cases * (i + 0.5) / (cases // 2500)) for i in range(cases // 2500)}
    stride = max(1, cases // cli_cases) if cli_cases else 0
    with tempfile.TemporaryDirectory(prefix="car-input-fuzz-", dir=workdir) as tmp:
        fuzzer = Fuzzer(Path(tmp), embedder, cli=bool(cli_cases))
        due = 0  # CLI cases owed: one per stride, taken by the next file case
        try:
            for number in range(1, cases + 1):
                case = build_case(rng, number, five_mb=number in five_mb)
                due += bool(stride) and number % stride == 0 and fuzzer.stats["cli_cases"] + due < cli_cases
                due -= fuzzer.run_case(case, cli=due > 0)
                if progress and number % 500 == 0:
                    progress(f"{number}/{cases} cases, {fuzzer.stats['cli_cases']} through the CLI, "
                             f"{len(fuzzer.violations)} violations, {time.perf_counter() - started:.0f} s")  # fmt: skip
            fuzzer.reopen()
            if cli_cases:
                fuzzer.query_cli_store()
        finally:
            fuzzer.store.close()
    fuzzer.stats["cases"] = cases
    return FuzzReport(cases, seed, cli_cases, fuzzer.stats, fuzzer.violations, time.perf_counter() - started, fuzzer.categories)


def format_report(report: FuzzReport, *, max_violations: int = 20) -> str:
    s = report.stats
    lines = [
        "fuzz_inputs: malformed and hostile records and policies through CARStore.ingest, load_policy and car-rag ingest",
        f"car-rag {car_rag.__version__}, Python {platform.python_version()}; policy {POLICY}; seed {report.seed}",
        f"cases: {report.cases} (records {s['kind_records']}: {s['api_files']} as JSONL files, {s['api_items']} as "
        f"Python items; policy files {s['kind_policy']}); through the car-rag CLI as well: {s['cli_cases']}",
        f"pre-existing store: {len(CHECK_RECORDS)} check records; {len(CHECK_QUERIES)} check queries x "
        f"{len(CHECK_CALLERS)} callers compared after every case ({s['integrity_checks']} checks)",
        f"runtime: {report.seconds:.0f} s on {os.cpu_count()} CPU cores",
        "",
        f"{'category':<20} {'cases':>6} {'accepted':>9} {'partly':>7} {'rejected':>9} {'crashed':>8} "
        f"{'bad lines':>10} {'stored':>7} {'CLI':>5} {'CLI exit 0/1/2':>15}",
    ]
    for name in sorted(report.categories):
        c = report.categories[name]
        exits = "/".join(str(c[f"cli_exit_{code}"]) for code in (0, 1, 2)) if c["cli_cases"] else "-"
        lines.append(
            f"{name:<20} {c['cases']:>6} {c['accepted']:>9} {c['partly_rejected']:>7} {c['rejected']:>9} {c['crashed']:>8} "
            f"{c['rejected_lines']:>10} {c['stored_records']:>7} {c['cli_cases']:>5} {exits:>15}"
        )
    total: Counter[str] = Counter()
    for c in report.categories.values():
        total.update(c)
    lines += [
        f"{'all':<20} {total['cases']:>6} {total['accepted']:>9} {total['partly_rejected']:>7} {total['rejected']:>9} "
        f"{total['crashed']:>8} {total['rejected_lines']:>10} {total['stored_records']:>7} {total['cli_cases']:>5}",
        "",
        f"record errors: {s['record_errors']} (naming a record {s['record_errors_naming_a_record']}, a field "
        f"{s['record_errors_naming_a_field']}; every one its line); policy errors: {s['policy_errors']}",
        f"records stored on the way: {total['stored_records']} (largest text {s['largest_text']:,} characters); "
        f"{s['stored_records_probed']} of them queried for and rendered as XML (found in the result: "
        f"{s['probes_returning_the_record']}); store reopened from disk at the end with {s['reopened_records']} records",
        f"CLI: exit 0 {s['cli_exit_0']}, exit 1 {s['cli_exit_1']}, exit 2 {s['cli_exit_2']}, tracebacks {s['cli_tracebacks']}; "
        f"car-rag query on the CLI store at the end: {s['cli_check_queries']} check answers",
        f"violations: {len(report.violations)} in {s['cases_with_violations']} cases",
    ]
    kinds = Counter(v.kind for v in report.violations)
    lines += [f"  {kind}: {count}" for kind, count in sorted(kinds.items())]
    lines += [f"  {v}" for v in report.violations[:max_violations]]
    lines.append(
        "result: PASS - every case ended in success or an error naming its line, record and field (no crash, "
        "no traceback, CLI exit codes right); the pre-existing store answered its check queries identically "
        "after every case, after reopening and through the CLI"
        if report.ok
        else "result: FAIL"
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000, help="cases in all (default 10000)")
    parser.add_argument("--cli-cases", type=int, default=120, help="of them, how many also through car-rag ingest (default 120)")
    parser.add_argument("--seed", type=int, default=20240611, help="seed (default 20240611)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    if args.cases < 1 or args.cli_cases < 0:
        parser.error("--cases must be >= 1 and --cli-cases >= 0")
    report = run_fuzz(args.cases, args.seed, cli_cases=args.cli_cases, progress=lambda m: print(m, file=sys.stderr, flush=True))
    text = format_report(report)
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
