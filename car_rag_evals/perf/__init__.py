"""What the measuring scripts share (``evals/perf/``, ``evals/serve/``, ``evals/serve_scale.py``):

* :mod:`~car_rag_evals.perf.corpus` — seeded security-advisory corpora of any size, new records
  for a store built from one, and the generalised rules over them;
* :mod:`~car_rag_evals.perf.stats` — latency percentiles and this process's memory, as a phase
  reports them.

The scripts stay scripts (``python evals/perf/run.py``): a script's own folder is on its path,
a folder beside it is not, so what two folders use lives here.
"""
