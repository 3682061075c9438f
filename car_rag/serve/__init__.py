"""``car-rag serve`` (the ``car-rag[serve]`` extra): the retriever over HTTP. :mod:`.keys`
(API keys → callers) needs no extra; :mod:`.app` needs FastAPI and prometheus_client."""
