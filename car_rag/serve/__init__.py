"""``car-rag serve`` (the ``car-rag[serve]`` extra): the retriever over HTTP. :mod:`.keys`
(API keys → callers) needs no extra; :mod:`.app` needs FastAPI and prometheus_client."""

INSERT_WINDOW_MS = 5.0
"""How long the first of a group of inserts waits for others to join it (``car-rag serve
--insert-window-ms``): a single insert costs ~18 ms, 16 of them Chroma's per call, paid once
per group. Here, not in :mod:`.app`, so that ``car-rag --help`` imports no FastAPI."""
