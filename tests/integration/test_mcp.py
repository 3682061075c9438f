"""`car-rag mcp` through the official MCP SDK's own client: the command spawned over stdio on a
real store (demo corpus, MiniLM), its tools listed and called; `retrieve` marks every superseded
record with what voids it; `explain` gives a record's authority chain, never naming a record the
caller may not read; the same `retrieve` over a `car-rag serve` (--url). Each session is bounded
in time. Without the `mcp` package the command says which extra installs it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from car_rag import CARStore
from car_rag.cli import main
from car_rag.cli.mcp import API_KEY_ENV
from car_rag.serve.keys import hash_key, load_api_keys
from car_rag.serve.service import Service
from car_rag_evals.servers import serving

SESSION_S = 240
"""How long one MCP session may take, the server's start (the store, MiniLM) included."""
LODASH = "sec-lodash-cve-2099-10001-disclosure"
LODASH_FIX = "sec-lodash-4.17.12-release"
ACME_FIX: dict[str, Any] = {
    "doc_id": "sec-lodash-acme-backport",
    "doc_type": "patch_release",
    "tenant": "acme",
    "text": "Acme backport of the lodash merge fix.",
    "scope": {"package": "lodash", "cve_id": "CVE-2099-10001"},
    "published_at": "2025-06-01",
    "supersedes": [LODASH_FIX],
}

ZIPCRAFT_FIX = "sec-zipcraft-2.3.4-release"
ERRATA: dict[str, Any] = {  # public, but for one principal only: it voids a record every caller reads
    "doc_id": "sec-zipcraft-errata-restricted",
    "doc_type": "patch_release",
    "allowed_principals": ["security-team"],
    "text": "Errata for zipcraft 2.3.4, for the security team.",
    "scope": {"package": "zipcraft"},
    "published_at": "2025-07-01",
    "supersedes": [ZIPCRAFT_FIX],
}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory, demo_policy, embedder, demo_corpus_path) -> Path:
    path = tmp_path_factory.mktemp("mcp-store")
    with CARStore.open(path, demo_policy, embedder=embedder) as store:
        assert store.ingest(demo_corpus_path, progress=False).errors == []
        assert store.ingest([ACME_FIX, ERRATA], progress=False).errors == []
    return path


def _environment() -> dict[str, str]:
    """What the spawned command needs of this one's environment (the SDK passes only a few variables)."""
    names = ("PYTHONPATH", "HF_HUB_OFFLINE", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "ANONYMIZED_TELEMETRY")
    return {name: os.environ[name] for name in names if name in os.environ}


def _session(*arguments: str, env: dict[str, str] | None = None) -> Any:
    """Run ``car-rag mcp ARGUMENTS`` and call ``calls`` ((tool, arguments) pairs) in one session;
    returns the tool names and each call's result."""

    def run(calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
        async def go() -> tuple[list[str], list[Any]]:
            server = StdioServerParameters(
                command=sys.executable, args=["-m", "car_rag", "mcp", *arguments], env={**_environment(), **(env or {})}
            )
            with anyio.fail_after(SESSION_S):
                async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    tools = [tool.name for tool in (await session.list_tools()).tools]
                    return tools, [await session.call_tool(name, args) for name, args in calls]

        return anyio.run(go)

    return run


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    assert data == json.loads(result.content[0].text)  # what an agent reading only the text gets is the same
    return data


def test_retrieve_and_explain_through_the_sdk_client(store_path, demo_queries):
    question = demo_queries[0]
    calls = [
        ("retrieve", {"query": question["query"], "k": 10}),
        ("explain", {"doc_id": LODASH}),
        ("explain", {"doc_id": "no-such-record"}),
        ("retrieve", {"query": question["query"], "k": 0}),
    ]
    tools, (retrieved, explained, missing, bad_k) = _session("--store", str(store_path))(calls)
    assert sorted(tools) == ["explain", "retrieve"]

    got = _structured(retrieved)
    records = {r["doc_id"]: r for r in got["records"]}
    assert [r["document"] for r in got["records"]] == list(range(1, len(records) + 1))
    assert got["evidence"].count("[Document ") == len(records)
    assert records[LODASH]["status"] == "superseded" and LODASH_FIX in records[LODASH]["superseded_by"]
    assert {"doc_id": LODASH_FIX, "rule": "patch_fixes_disclosure"} in records[LODASH]["voided_by"]
    assert all(r["superseded_by"] or r["hidden_superseder"] for r in got["records"] if r["status"] == "superseded")
    headers = [line for line in got["evidence"].split("\n") if line.startswith("[Document ")]
    for r, header in zip(got["records"], headers, strict=True):  # the text itself marks what is replaced
        assert ("replaced by" in header) == bool(r["superseded_by"]), header

    chain = _structured(explained)
    assert chain["doc_id"] == LODASH and chain["status"] == "superseded" and not chain["hidden_superseder"]
    assert LODASH_FIX in [c["doc_id"] for c in chain["controlling"]]
    edge = next(e for e in chain["chain"] if e["superseder"] == LODASH_FIX)
    assert edge["target"] == LODASH and edge["rule"] == "patch_fixes_disclosure" and edge["rule_description"]
    # Unrestricted (no --tenant): acme's backport is a record like any other, but a tenant's record
    # voids no public one (car_rag.trust), so it is no part of the chain.
    assert ACME_FIX["doc_id"] not in json.dumps(chain)

    assert missing.is_error and "no record 'no-such-record'" in missing.content[0].text
    assert bad_k.is_error and "k must be between 1 and 100" in bad_k.content[0].text


def test_explain_reads_as_the_caller(store_path):
    calls = [("explain", {"doc_id": ACME_FIX["doc_id"]}), ("explain", {"doc_id": ZIPCRAFT_FIX})]
    _, (acme_record, zipcraft) = _session("--store", str(store_path), "--tenant", "globex")(calls)
    # Another tenant's record is missing to globex, in the same words as one that does not exist.
    assert acme_record.is_error and f"no record {ACME_FIX['doc_id']!r}" in acme_record.content[0].text
    # acme explains its own record by the id it wrote (the store holds it under a tenant key).
    _, (own,) = _session("--store", str(store_path), "--tenant", "acme")([calls[0]])
    mine = _structured(own)
    assert mine["doc_id"] == ACME_FIX["doc_id"] and "\x1f" not in json.dumps(mine)
    hidden = _structured(zipcraft)
    assert hidden["status"] == "superseded" and hidden["hidden_superseder"]
    assert hidden["controlling"] == hidden["chain"] == hidden["voided_by"] == []
    assert ERRATA["doc_id"] not in json.dumps(hidden)
    _, (shown,) = _session("--store", str(store_path), "--principal", "security-team")([calls[1]])
    seen = _structured(shown)
    assert seen["status"] == "superseded" and not seen["hidden_superseder"]
    assert [c["doc_id"] for c in seen["controlling"]] == [ERRATA["doc_id"]]
    assert seen["chain"][0] | {"rule_description": ""} == {
        "superseder": ERRATA["doc_id"],
        "target": ZIPCRAFT_FIX,
        "rule": "explicit",
        "rule_description": "",
        "confidence": 1.0,
        "superseder_status": "active",
    }


def test_retrieve_and_explain_over_a_car_rag_serve(store_path, demo_policy, embedder, demo_queries, tmp_path):
    question = demo_queries[0]
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "globex", "tenant": "globex", "sha256": hash_key("k-globex")}]}))
    keys.chmod(0o600)
    calls = [
        ("retrieve", {"query": question["query"], "k": 10}),
        ("explain", {"doc_id": LODASH}),
        ("explain", {"doc_id": ACME_FIX["doc_id"]}),
        ("explain", {"doc_id": ZIPCRAFT_FIX}),
    ]
    with (
        CARStore.open(store_path, demo_policy, embedder=embedder) as store,
        serving(Service(store, timeout_ms=30_000, api_keys=load_api_keys(keys))) as url,
    ):
        tools, (retrieved, explained, other_tenants, hidden) = _session("--url", url, env={API_KEY_ENV: "k-globex"})(calls)
        _, (wrong_key,) = _session("--url", url, env={API_KEY_ENV: "wrong"})([("explain", {"doc_id": LODASH})])
    assert sorted(tools) == ["explain", "retrieve"]
    got = _structured(retrieved)
    records = {r["doc_id"]: r for r in got["records"]}
    assert records[LODASH]["status"] == "superseded" and LODASH_FIX in records[LODASH]["superseded_by"]
    headers = [line for line in got["evidence"].split("\n") if line.startswith("[Document ")]
    for r, header in zip(got["records"], headers, strict=True):  # the server's text marks what is replaced
        assert ("replaced by" in header) == bool(r["superseded_by"] or r["hidden_superseder"]), header
    assert any("replaced by" in header for header in headers)

    chain = _structured(explained)  # the same chain as over the store
    assert chain["doc_id"] == LODASH and chain["status"] == "superseded"
    assert LODASH_FIX in [c["doc_id"] for c in chain["controlling"]]
    assert next(e for e in chain["chain"] if e["superseder"] == LODASH_FIX)["rule"] == "patch_fixes_disclosure"
    # As the key reads: another tenant's record is missing in the words of one that does not exist;
    # a record voided only by one the key may not read is superseded, its voider unnamed.
    assert other_tenants.is_error and f"no record {ACME_FIX['doc_id']!r}" in other_tenants.content[0].text
    shown = _structured(hidden)
    assert shown["status"] == "superseded" and shown["hidden_superseder"] and ERRATA["doc_id"] not in json.dumps(shown)
    assert wrong_key.is_error and "401" in wrong_key.content[0].text


@pytest.fixture
def without_mcp(monkeypatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # import fails as if not installed
    yield


def test_without_the_sdk_the_command_names_the_extra(without_mcp, store_path, capsys):
    assert main(["mcp", "--store", str(store_path)]) == 1
    assert "pip install 'car-rag[mcp]'" in capsys.readouterr().err


def test_store_or_url_not_both_and_a_missing_store(store_path, tmp_path, capsys):
    assert main(["mcp", "--store", str(store_path), "--url", "http://127.0.0.1:1"]) == 2
    assert "give either --store" in capsys.readouterr().err
    assert main(["mcp", "--store", str(tmp_path / "none")]) == 1
    assert f"no car-rag store at {tmp_path / 'none'}: run car-rag ingest first" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
