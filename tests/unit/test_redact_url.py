"""``redact_url`` hides the password of every form a PostgreSQL connection string takes (issue 32:
key-value ``password=`` and ``?password=`` were logged at INFO)."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from car_rag.postgres import redact_url

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://car:{SECRET}@db.example:5432/rag?sslmode=require",
        f"postgres://car:{SECRET}@[::1]/rag",
        f"postgresql://car@db.example/rag?password={SECRET}&sslmode=require",
        f"postgresql:///rag?host=/var/run/postgresql&password={SECRET}",
        f"postgresql://car:{SECRET}@db.example/rag?password={SECRET}",
        f"host=db.example user=car password={SECRET} dbname=rag",
        f"host=db.example password = '{SECRET} with \\' quote' dbname=rag",
        f"password={SECRET}",
    ],
)
def test_no_form_of_connection_string_keeps_its_password(url: str) -> None:
    redacted = redact_url(url)
    assert SECRET not in redacted and "***" in redacted
    kept = {k: v for k, v in conninfo_to_dict(url).items() if k != "password"}
    assert {k: v for k, v in conninfo_to_dict(redacted).items() if k != "password"} == kept  # the rest still says where


def test_a_string_libpq_cannot_read_is_not_shown() -> None:
    assert SECRET not in redact_url(f"host=db password='{SECRET}")  # an unterminated quote


def test_a_url_without_a_password_is_unchanged() -> None:
    assert redact_url("postgresql://car@db.example:5432/rag?sslmode=require") == (
        "postgresql://car@db.example:5432/rag?sslmode=require"
    )
