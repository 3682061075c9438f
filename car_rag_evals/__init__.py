"""The research harness of car-rag: the CAR paper's benchmark suites, the bench runner and
the systems it compares (the LlamaIndex and LangChain hybrids among them), the reader
evaluation, the guard over answer files, and plots.

It depends on the core (``car_rag``) and on the framework integrations; nothing in
``car_rag`` imports it: its ``car-rag`` commands (:mod:`~car_rag_evals.commands`: bench,
eval-llm, guard, report, fanin) are found through entry points, and load what they run when
they run.

* :mod:`~car_rag_evals.suites` — the built-in suites (corpora under ``../shared`` beside the
  checkout, or ``--corpora DIR``) and user corpora as suites;
* :mod:`~car_rag_evals.gold` — the suites' gold answers;
* :mod:`~car_rag_evals.systems`, :mod:`~car_rag_evals.framework_systems` — what a bench compares;
* :mod:`~car_rag_evals.bench` — ``car-rag bench``; :mod:`~car_rag_evals.plots` — its PNGs;
* :mod:`~car_rag_evals.llm` — ``car-rag eval-llm`` (conditions, client, cache, runner, report);
* :mod:`~car_rag_evals.guard_run` — ``car-rag guard``;
* what the tests and the ``evals/`` scripts share, so that neither edits ``sys.path``:
  :mod:`~car_rag_evals.servers` (``chroma run`` and ``car-rag serve`` on loopback),
  :mod:`~car_rag_evals.perf` (the scale benchmark's corpus and statistics),
  :mod:`~car_rag_evals.results_header` (what an eval's results open with: command, commit, time,
  machine, load) and :mod:`~car_rag_evals.xml_fuzz` (adversarial evidence packets and the
  renderings' invariants).

The throwaway PostgreSQL + pgvector of the integrations' PGVector tests and the parity scripts is
the library's own (:mod:`car_rag.postgres.fixture`), which every test suite uses.
"""
