"""Do no harm (issue 30): on every dev suite the defaults must score at least
``--no-latent-scope`` and ``--anchors bm25 --no-latent-scope``, measured in the same run.

Suites: the paper's eight, the four mirrors (``evals/mirror_suites.py``) and the two real
corpora (KEPs, EIPs; scored by gold inclusion). For each suite the BM25 and dense runs of every
query are searched once (each configuration's own depth) and every configuration replays them
through ``ControllingAuthorityRetriever.resolve_runs``: fusion, the latent-scope step and
Stages 2 + 3, the code ``retrieve`` runs after searching. The first ``--check`` queries of each
suite are also retrieved end to end with ``retrieve``; the table counts those whose top k
differs from the replay's (it should say 0). Configurations: :data:`~car_rag_evals.systems.DO_NO_HARM`
(the CLI defaults and its two flags) and, with ``--config JSON``, a candidate's retriever
options (``{"scope_ties": 0.25}``), checked against the same two baselines.

    python evals/do_no_harm.py --stores .car-stores --out evals/results/anchors
    python evals/do_no_harm.py --suites cvepatchqa-freeform,real-keps --config '{"latent_scope": false}'

Writes ``do_no_harm.md`` (TCA@5 per suite and configuration, whether the defaults do no harm,
the share of questions whose result carries an ``ambiguity``) and ``do_no_harm.json`` (the
same, with the ids of every question each configuration misses).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from car_rag.eval.metrics import score_query
from car_rag.queries import load_queries
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag_evals.suites import DEV_SUITES, SUITES, load_suite, open_suite_store
from car_rag_evals.systems import DO_NO_HARM

DEFAULTS, *BASELINES = DO_NO_HARM
CANDIDATE = "candidate"
FLAGS = {
    "car-default": "defaults",
    "car-no-latent-scope": "--no-latent-scope",
    "car-bm25-no-latent-scope": "--anchors bm25 --no-latent-scope",
}


def suite_scores(
    name: str, configs: dict[str, dict[str, Any]], stores: Path, mirrors: Path | None, *, k: int = 5, check: int = 10
) -> dict[str, Any]:
    """Every configuration on one suite, each channel searched once per query and depth."""
    suite = load_suite(name, mirrors_dir=mirrors)
    store = open_suite_store(suite, stores, progress=True)
    queries = load_queries(suite.queries)
    retrievers = {c: ControllingAuthorityRetriever(store, **options) for c, options in configs.items()}
    dense = any(r.anchor_mode != "bm25" for r in retrievers.values())
    vectors = store.embedder.encode([q.query for q in queries]) if dense else None
    runs: dict[int, list[dict]] = {}
    for depth in sorted({r.depth for r in retrievers.values()}):
        runs[depth] = [
            {
                "bm25": store.lexical.search(q.query, depth),
                **({"dense": store.dense.search(vectors[i], depth)} if vectors is not None else {}),
            }
            for i, q in enumerate(queries)
        ]
    out: dict[str, Any] = {"queries": len(queries), "documents": len(store), "configs": {}}
    for config, retriever in retrievers.items():
        channels = {"bm25": ("bm25",), "dense": ("dense",)}.get(retriever.anchor_mode, ("bm25", "dense"))
        tca = hit = ambiguous = mismatched = links = wrong_links = 0
        missed, wrong, after_fusion_ms = [], [], []
        for i, query in enumerate(tqdm(queries, desc=f"{name} {config}", unit="q", leave=False)):
            result = retriever.resolve_runs(query.query, {c: runs[retriever.depth][i][c] for c in channels})
            ranked = result.doc_ids()
            after_fusion_ms.append(result.timings_ms["latent_scope"] + result.timings_ms["stage23"])
            if i < check:
                mismatched += retriever.retrieve(query.query).doc_ids()[:k] != ranked[:k]
            s = score_query(
                query,
                ranked,
                k=k,
                records=store.records,
                kb=store.graph,
                policy=store.policy,
                answer_rule=suite.answer_rule,
                anchors=[a.doc_id for a in result.anchors],
            )
            tca, hit = tca + s.tca, hit + s.frontier_included
            ambiguous += result.ambiguity is not None
            if not s.tca:
                missed.append(query.query_id)
            # A linked scope value is right when the question's own records carry it (anchor, gold, chain).
            own = [
                store.records[d].scope
                for d in {*query.anchor_doc_ids, *query.gold_doc_ids, *query.chain_doc_ids}
                if d in store.records
            ]
            for link in result.scope_links:
                links += 1
                if not any(scope.get(link.key) == link.value for scope in own):
                    wrong_links += 1
                    wrong.append({"query_id": query.query_id, **link.to_dict()})
        n = len(queries)
        out["configs"][config] = {
            "tca": round(tca / n, 4),
            "hit": round(hit / n, 4),
            "ambiguity_share": round(ambiguous / n, 4),
            "replay_checked": min(check, n),
            "replay_mismatches": mismatched,
            "missed": missed,
            "links": links,
            "wrong_links": wrong_links,
            "wrong_links_per_100": round(100 * wrong_links / n, 2),
            "link_precision": None if not links else round(1 - wrong_links / links, 4),
            "wrong": wrong,
            "latent_and_stage23_p50_ms": round(statistics.median(after_fusion_ms), 3),
        }
    store.close()
    scores = {c: v["tca"] for c, v in out["configs"].items()}
    out["do_no_harm"] = {c: all(scores[c] >= scores[b] for b in BASELINES) for c in (DEFAULTS, CANDIDATE) if c in scores}
    return out


def markdown(table: dict[str, dict[str, Any]], configs: dict[str, dict[str, Any]], command: str, k: int) -> str:
    names = list(configs)
    heads = [FLAGS.get(c, f"candidate `{json.dumps(configs[c])}`") for c in names]
    judged = [c for c in (DEFAULTS, CANDIDATE) if c in configs]
    lines = [
        f"# Do no harm: TCA@{k} of the defaults against `--no-latent-scope` and `--anchors bm25 --no-latent-scope`",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every suite here is "
        "development data (defaults may be chosen on it). Each channel is searched once per query and every "
        'configuration replays the runs through `ControllingAuthorityRetriever.resolve_runs`; "replay" counts, of the '
        "first queries of each suite retrieved end to end as well, those whose top k differs (summed over "
        'configurations). "harm" marks a suite where a judged configuration scores below either baseline; '
        '"ambiguous" is the share of questions whose result carries an `ambiguity` (per configuration); '
        '"linked" counts the scope values the defaults linked from the questions\' words and how many of them no '
        'record of the question (anchor, gold, chain) carries (wrong links per 100 questions; precision); "ms" is '
        "the median time of the latent-scope step (linking included) and Stages 2+3 per question, defaults.",
        "",
        "| suite | n | "
        + " | ".join(heads)
        + " | "
        + " | ".join(f"{FLAGS.get(c, c)}: no harm" for c in judged)
        + " | ambiguous ("
        + ", ".join(FLAGS.get(c, c) for c in names)
        + ") | linked (wrong per 100; precision) | ms | replay |",
        "|---|---|" + "---|" * (len(names) + len(judged) + 4),
    ]
    for suite, entry in table.items():
        cells = entry["configs"]
        best = max(cells[c]["tca"] for c in names)
        lines.append(
            f"| {suite} | {entry['queries']} | "
            + " | ".join(f"**{cells[c]['tca']:.3f}**" if cells[c]["tca"] == best else f"{cells[c]['tca']:.3f}" for c in names)
            + " | "
            + " | ".join("yes" if entry["do_no_harm"][c] else "**harm**" for c in judged)
            + " | "
            + ", ".join(f"{cells[c]['ambiguity_share']:.2f}" for c in names)
            + f" | {_linked(cells[DEFAULTS])} | {cells[DEFAULTS]['latent_and_stage23_p50_ms']:.2f}"
            + f" | {sum(cells[c]['replay_mismatches'] for c in names)}/{sum(cells[c]['replay_checked'] for c in names)} |"
        )
    for c in judged:
        harmed = [s for s, e in table.items() if not e["do_no_harm"][c]]
        lines += [
            "",
            f"{FLAGS.get(c, c)}: "
            + (
                f"harm on {len(harmed)} of {len(table)} suites ({', '.join(harmed)})."
                if harmed
                else f"no harm on any of the {len(table)} suites."
            ),
        ]
    return "\n".join(lines) + "\n"


def _linked(cell: dict[str, Any]) -> str:
    if not cell["links"]:
        return "0"
    return f"{cell['links']} ({cell['wrong_links_per_100']:.1f}; {cell['link_precision']:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=Path, default=Path(".car-stores"))
    parser.add_argument("--mirrors", type=Path, help="where evals/mirror_suites.py wrote the mirrors (default evals/mirrors)")
    parser.add_argument("--out", type=Path, default=Path("evals/results/anchors"))
    parser.add_argument("--suites", default=",".join(SUITES + DEV_SUITES))
    parser.add_argument("--config", type=json.loads, help="a candidate's retriever options, as JSON")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--check", type=int, default=10, help="queries per suite also retrieved end to end")
    args = parser.parse_args()
    configs = {name: options for name, (_label, options) in DO_NO_HARM.items()}
    if args.config is not None:
        configs[CANDIDATE] = args.config
    command = shlex.join(["python", "evals/do_no_harm.py", *sys.argv[1:]])
    started = time.time()
    table = {
        name: suite_scores(name, configs, args.stores, args.mirrors, k=args.k, check=args.check)
        for name in args.suites.split(",")
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "do_no_harm.json").write_text(
        json.dumps(
            {
                "command": command,
                "k": args.k,
                "configs": configs,
                "suites": table,
                "minutes": round((time.time() - started) / 60, 1),
            },
            indent=1,
        )
        + "\n"
    )
    text = markdown(table, configs, command, args.k)
    (args.out / "do_no_harm.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
