"""``car-rag serve`` (the ``car-rag[serve]`` extra): the retriever over HTTP. :mod:`.keys`
(API keys → callers) needs no extra; the rest needs FastAPI and prometheus_client: :mod:`.service`
(retrieval under a deadline, readiness), :mod:`.inserts` (grouped, all-or-nothing inserts and who
may replace what), :mod:`.metrics`, :mod:`.asgi` (body limits, headers), :mod:`.app` (the routes),
:mod:`.workers` (``--workers N``)."""

INSERT_WINDOW_MS = 2.0
"""How long the first of a group of inserts waits for others to join it (``car-rag serve
--insert-window-ms``); requests arriving while a group is stored join the next one anyway. Most
of a single insert is Chroma's cost per call, paid once per group; a lone insert pays the window
(``evals/serve_inserts.py``: 1, 2, 5 and 10 ms grouped alike at 8 and 32 clients). Here, not in
:mod:`.inserts`, so that ``car-rag --help`` imports no FastAPI."""
