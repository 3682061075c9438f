"""Stage-1 anchors on a real store (MiniLM, embedded Chroma): the default fusion is never
below its better channel on corpora built so that one channel is useless; an ambiguous
question is reported as such (result, JSON, evidence, CLI), and a question that names its
package in a plain word gets that scope at probability 1.0."""

from __future__ import annotations

import json

import pytest

from car_rag import CARStore, ControllingAuthorityRetriever, Record, load_policy
from car_rag.cli import main
from car_rag.evidence import render_audit, render_plain, render_reader
from car_rag.policy import Policy
from helpers_records import retrieved

SEC = load_policy("security-advisory")
ONE_SCOPE = Policy(name="design-proposals", scope_keys=("project",), rules=())


def lexical_corpus() -> tuple[list[Record], list[tuple[str, str]]]:
    """Twelve disclosures in the same words, told apart only by an issue number: MiniLM
    embeds them nearly alike (a flat dense ranking), BM25 matches the number exactly."""
    records, queries = [], []
    for i in range(12):
        issue, scope = 48210 + i, {"package": "imagekit", "cve_id": f"CVE-2031-{1000 + i}"}
        records.append(
            Record(
                doc_id=f"i{i}-d",
                doc_type="vulnerability_disclosure",
                scope=scope,
                text=f"Issue {issue}: a heap overflow in the image decoder allows remote code execution.",
            )
        )
        records.append(
            Record(
                doc_id=f"i{i}-p",
                doc_type="patch_release",
                scope=scope,
                text=f"Version {i + 2}.0.0 is out. Thanks to all contributors.",
            )
        )
        queries.append((f"Has issue {issue} in the image decoder been fixed?", f"i{i}-p"))
    return records, queries


PARAPHRASES = [
    (
        "A user can sign in as any account without knowing its password.",
        "can attackers log on to someone else's account with no credentials?",
    ),
    ("Uploaded archives can write files outside the destination folder.", "could a zip file drop files anywhere on the disk?"),
    ("The server crashes when it receives a very large header.", "can an oversized request bring the service down?"),
    ("Session cookies are sent over unencrypted connections.", "might login tokens leak over plain HTTP?"),
    ("Templates render user input without escaping it.", "could a comment run script in other visitors' browsers?"),
    ("The updater downloads packages without checking signatures.", "can a tampered install file get onto machines?"),
]


def dense_corpus() -> tuple[list[Record], list[tuple[str, str]]]:
    """Every record and every question carry the same two words ("security notice") and
    nothing else in common: BM25 ties every record (a flat ranking), MiniLM reads the meaning."""
    records, queries = [], []
    for i, (text, question) in enumerate(PARAPHRASES):
        scope = {"package": f"pkg{i}", "cve_id": f"CVE-2032-{2000 + i}"}
        records.append(
            Record(doc_id=f"v{i}-d", text=f"Security notice. {text}", doc_type="vulnerability_disclosure", scope=scope)
        )
        records.append(
            Record(doc_id=f"v{i}-p", text=f"Security notice. Release {i}.4.2 ships.", doc_type="patch_release", scope=scope)
        )
        queries.append((f"Security notice: {question}", f"v{i}-p"))
    return records, queries


def hit_rate(store: CARStore, queries, **options) -> float:
    retriever = ControllingAuthorityRetriever(store, **options)
    return sum(gold in retriever.retrieve(q).doc_ids(5) for q, gold in queries) / len(queries)


@pytest.mark.parametrize("corpus", [lexical_corpus, dense_corpus], ids=["dense-useless", "bm25-useless"])
def test_default_fusion_is_never_below_its_better_channel(tmp_path, embedder, corpus):
    records, queries = corpus()
    store = CARStore.open(tmp_path / "store", SEC, embedder=embedder)
    assert store.ingest(records, progress=False).errors == []
    bm25 = hit_rate(store, queries, anchors="bm25", k1=5, fusion="rrf", latent_scope=False)
    dense = hit_rate(store, queries, anchors="dense", k1=10, fusion="rrf", latent_scope=False)
    default = hit_rate(store, queries)
    assert default >= max(bm25, dense), (default, bm25, dense)
    assert min(bm25, dense) < 1.0  # the corpus does make one channel fail
    store.close()


@pytest.fixture()
def ambiguous_store(tmp_path, embedder):
    attack = "Prototype pollution in the merge helper lets a remote attacker alter object prototypes."
    records = []
    for pkg, cve in (("alpha-utils", "CVE-2034-0001"), ("beta-utils", "CVE-2034-0002")):
        records.append(
            Record(doc_id=f"{pkg}-d", text=attack, doc_type="vulnerability_disclosure", scope={"package": pkg, "cve_id": cve})
        )
    records.append(
        Record(
            doc_id="alpha-utils-p",
            text="Release 3.1.0: maintenance.",
            doc_type="patch_release",
            scope={"package": "alpha-utils", "cve_id": "CVE-2034-0001"},
        )
    )
    store = CARStore.open(tmp_path / "amb", SEC, embedder=embedder)
    assert store.ingest(records, progress=False).errors == []
    yield store
    store.close()


def test_an_ambiguous_question_shows_each_probable_scope_with_its_probability(ambiguous_store):
    result = ControllingAuthorityRetriever(ambiguous_store).retrieve("Has the prototype pollution in merge been fixed?")
    got = {r.doc_id: (r.status, r.scope_probability) for r in result.top(5)}
    assert got["alpha-utils-p"][0] == "active" and got["beta-utils-d"][0] == "active"
    assert got["alpha-utils-d"][0] == "superseded"
    assert got["alpha-utils-p"][1] == pytest.approx(0.5, abs=0.01) and got["beta-utils-d"][1] == pytest.approx(0.5, abs=0.01)
    assert result.ambiguity is not None
    assert result.ambiguity.scopes == 2 and result.ambiguity.states == {"patched": 1, "vulnerable": 1}
    sentence = "The question matches 2 subjects it does not tell apart"
    assert render_plain(result, k=5).startswith(f"Note: {sentence}")
    assert sentence in render_reader(result, k=5) and sentence in render_audit(result, k=5)
    named = ControllingAuthorityRetriever(ambiguous_store).retrieve("Has CVE-2034-0002 been fixed?")
    assert named.top(1)[0].doc_id == "beta-utils-d"
    assert named.top(1)[0].scope_probability == pytest.approx(1.0)
    assert retrieved(named, "alpha-utils-p").scope_probability == pytest.approx(0.0)
    assert named.ambiguity is None


def test_a_package_named_in_a_plain_word_is_the_questions_scope(ambiguous_store):
    result = ControllingAuthorityRetriever(ambiguous_store).retrieve("Has the prototype pollution in alpha-utils been fixed?")
    assert [(link.key, link.value) for link in result.scope_links] == [("package", "alpha-utils")]
    assert result.top(1)[0].doc_id == "alpha-utils-p" and result.top(1)[0].scope_probability == pytest.approx(1.0)
    assert result.ambiguity is None
    # Without the latent-scope step nothing is linked and no probability is claimed.
    plain = ControllingAuthorityRetriever(ambiguous_store, latent_scope=False).retrieve(
        "Has the prototype pollution in alpha-utils been fixed?"
    )
    assert plain.scope_links == () and plain.ambiguity is None


def test_cli_json_carries_scope_probabilities_and_the_posterior(ambiguous_store, capsys):
    path = ambiguous_store.path
    ambiguous_store.close()
    assert main(["query", "--store", str(path), "--format", "json", "Has the prototype pollution in merge been fixed?"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(isinstance(r["scope_probability"], float) for r in data["records"])
    assert [round(s["probability"], 1) for s in data["scope_posterior"]] == [0.5, 0.5]
    assert set(data["records"][0]["stage1"]["contributions"]) <= {"bm25", "dense"}
    assert data["ambiguity"]["scopes"] == 2 and data["ambiguity"]["states"] == {"patched": 1, "vulnerable": 1}
    assert {m["state"] for m in data["ambiguity"]["members"]} == {"patched", "vulnerable"}
    assert main(["query", "--store", str(path), "Has the prototype pollution in merge been fixed?"]) == 0
    assert capsys.readouterr().out.startswith("ambiguous: The question matches 2 subjects it does not tell apart")
    for form in ("plain", "reader", "audit"):
        assert main(["query", "--store", str(path), "--format", form, "Has the prototype pollution in merge been fixed?"]) == 0
        assert "The question matches 2 subjects it does not tell apart" in capsys.readouterr().out
    assert (
        main(
            [
                "query",
                "--store",
                str(path),
                "--format",
                "json",
                "--no-latent-scope",
                "--fusion",
                "rrf",
                "Has the prototype pollution in merge been fixed?",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["scope_posterior"] is None and {r["scope_probability"] for r in data["records"]} == {None}
    assert data["ambiguity"] is None


def test_hnsw_search_runs_beside_bm25_and_answers_as_one_after_the_other(tmp_path, embedder, demo_policy, demo_corpus_path):
    """Past the exact-search limit the dense search runs on a worker thread while BM25 runs:
    the same hits, scores and result as searching one channel after the other."""
    store = CARStore.open(tmp_path / "hnsw", demo_policy, embedder=embedder)
    store.ingest(demo_corpus_path, progress=False)
    store.dense.exact_limit = len(store) - 1
    store.ingest([Record(doc_id="one-more", text="An unrelated maintenance note.", doc_type="note")], progress=False)
    assert not store.dense.exact
    retriever = ControllingAuthorityRetriever(store)
    for question in ("Is the lodash prototype pollution still unpatched?", "Is Okafor still good law?"):
        result = retriever.retrieve(question)
        vector = embedder.encode([question])[0]
        one_by_one = {
            "bm25": store.lexical.search(question, retriever.depth),
            "dense": store.dense.search(vector, retriever.depth),
        }
        expected = retriever.resolve_runs(question, one_by_one)
        assert [(r.doc_id, r.status) for r in result] == [(r.doc_id, r.status) for r in expected]
        assert [a.channel_scores for a in result.anchors] == [a.channel_scores for a in expected.anchors]
    assert retriever._pool is not None  # the worker thread was used
    store.close()


def test_bad_questions_and_small_stores_answer_with_a_sensible_ambiguity(tmp_path, embedder, ambiguous_store):
    retriever = ControllingAuthorityRetriever(ambiguous_store)
    only_stop_words = retriever.retrieve("the and of is it")  # BM25 finds nothing; dense still answers
    assert only_stop_words.scope_links == () and len(only_stop_words) > 0
    assert only_stop_words.ambiguity is None or only_stop_words.ambiguity.scopes >= 2
    # A scope value that is a single common word: linked only where Stage 1 agrees.
    common = [
        Record(
            doc_id="req-d",
            text="The request library follows redirects to any host.",
            doc_type="vulnerability_disclosure",
            scope={"package": "request", "cve_id": "CVE-2035-0001"},
        ),
        Record(
            doc_id="srv-d",
            text="Server-side request forgery in the image proxy of thumbor.",
            doc_type="vulnerability_disclosure",
            scope={"package": "thumbor", "cve_id": "CVE-2035-0002"},
        ),
        Record(
            doc_id="srv-p",
            text="Version 7.3.1 released.",
            doc_type="patch_release",
            scope={"package": "thumbor", "cve_id": "CVE-2035-0002"},
        ),
    ]
    with CARStore.open(tmp_path / "common", SEC, embedder=embedder) as store:
        assert store.ingest(common, progress=False).errors == []
        forgery = ControllingAuthorityRetriever(store).retrieve("Is the server-side request forgery in the image proxy fixed?")
        assert ("package", "request") not in {(link.key, link.value) for link in forgery.scope_links}
        assert forgery.top(1)[0].doc_id == "srv-p"
    # A store with one scope: nothing to tell apart.
    one = [
        Record(
            doc_id=f"kep-{i}",
            text=f"Proposal {i}: topology aware routing, revision {i}.",
            doc_type="design_proposal",
            scope={"project": "kubernetes"},
        )
        for i in range(4)
    ]
    with CARStore.open(tmp_path / "one", ONE_SCOPE, embedder=embedder) as store:
        assert store.ingest(one, progress=False).errors == []
        result = ControllingAuthorityRetriever(store).retrieve("Is topology aware routing still the plan?")
        assert result.ambiguity is None and {r.scope_probability for r in result} == {1.0}
