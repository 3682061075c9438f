"""``car-rag serve`` (the ``car-rag[serve]`` extra): the retriever over HTTP. :mod:`.keys`
(API keys → callers) needs no extra; :mod:`.app` needs FastAPI and prometheus_client."""

INSERT_WINDOW_MS = 2.0
"""How long the first of a group of inserts waits for others to join it (``car-rag serve
--insert-window-ms``); requests arriving while a group is stored join the next one anyway. Most
of a single insert is Chroma's cost per call, paid once per group; a lone insert pays the window
(``evals/serve_inserts.py``: 1, 2, 5 and 10 ms grouped alike at 8 and 32 clients). Here, not in
:mod:`.app`, so that ``car-rag --help`` imports no FastAPI."""
