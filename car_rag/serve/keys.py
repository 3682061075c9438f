"""API keys for ``car-rag serve``: each key maps to the caller a request is made for.

The caller context (tenant, principals) comes from the key alone, never from the request
body, so no request can read as another tenant. The keys file (TOML or JSON) holds each key
as its SHA-256, never in clear::

    [[keys]]
    name = "acme-analysts"      # what logs say; never the key
    sha256 = "5e88..."          # printf %s "$KEY" | sha256sum
    tenant = "acme"             # omitted: the key reads public records only
    principals = ["analyst"]
    write = false               # true: may POST /records, for its own tenant only
    publisher = false           # true (a key with no tenant): the public records it writes may
                                # void tenants' records (car_rag.trust); they carry its name
    publisher_scopes = { package = ["lodash"] }   # with publisher = true: only tenants' records
                                # whose scope holds one of these values (left out: every scope)
"""

from __future__ import annotations

import hashlib
import json
import logging
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError, field_validator, model_validator

from car_rag.eligibility import CallerContext
from car_rag.records import PUBLIC_TENANT
from car_rag.trust import PublisherScopes

__all__ = ["ApiKey", "ApiKeys", "KeysFileError", "hash_key", "load_api_keys"]

log = logging.getLogger(__name__)

_EMPTY_KEY = hashlib.sha256(b"").hexdigest()
"""The SHA-256 of the empty key: an entry holding it lets any request that sends ``Bearer`` with
nothing after it in."""


class KeysFileError(ValueError):
    """A keys file that cannot be read as one; the message names the entry and field."""


def hash_key(key: str) -> str:
    """The SHA-256 (hex) a keys file stores for ``key``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKey(BaseModel):
    """One entry of the keys file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$", description="SHA-256 of the key, hex")
    tenant: str | None = None
    principals: tuple[str, ...] = ()
    write: StrictBool = False
    """Strict: ``"false"`` or ``"no"`` (text, not a boolean) would otherwise read as a writer or not."""
    publisher: StrictBool = Field(default=False, description="Its public records may void tenants' (car_rag.trust).")
    publisher_scopes: dict[StrictStr, tuple[StrictStr, ...]] | None = Field(
        default=None,
        description="Scope key -> values: a publisher key's records void tenants' records only in these scopes.",
    )

    @field_validator("publisher_scopes")
    @classmethod
    def _scopes(cls, value: dict[str, tuple[str, ...]] | None) -> dict[str, tuple[str, ...]] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("names no scope key: leave it out for every scope, or set publisher = false")
        for key, values in value.items():
            if not key.strip() or not values or any(not v.strip() for v in values):
                raise ValueError(f"{key!r}: needs a scope key and a non-empty list of non-blank values")
        return value

    @field_validator("sha256")
    @classmethod
    def _lower(cls, value: str) -> str:
        if value.lower() == _EMPTY_KEY:
            raise ValueError('is the SHA-256 of the empty key (printf %s "$KEY" | sha256sum with KEY unset?)')
        return value.lower()

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value == PUBLIC_TENANT):
            raise ValueError(f"must be a tenant name (not blank, not {PUBLIC_TENANT!r})")
        return value

    @field_validator("principals")
    @classmethod
    def _principals(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not p.strip() for p in value):
            raise ValueError("principal names must not be blank")
        return value

    @model_validator(mode="after")
    def _publishes_public_records(self) -> ApiKey:
        if self.publisher and (self.tenant is not None or not self.write):
            raise ValueError("publisher: a publisher key writes public records: it needs write = true and no tenant")
        if self.publisher_scopes is not None and not self.publisher:
            raise ValueError("publisher_scopes: only a publisher key (publisher = true) publishes for scopes")
        return self

    @property
    def caller(self) -> CallerContext:
        return CallerContext(self.tenant, frozenset(self.principals))


@dataclass(frozen=True)
class ApiKeys:
    """The keys a server accepts, looked up by the SHA-256 of what a request presents."""

    by_hash: dict[str, ApiKey]

    def lookup(self, presented: str) -> ApiKey | None:
        return self.by_hash.get(hash_key(presented))

    @property
    def publisher_scopes(self) -> Mapping[str, PublisherScopes]:
        """The scopes of each publisher key that names some (the trust a store opened for them decides by)."""
        return {k.name: k.publisher_scopes for k in self.by_hash.values() if k.publisher_scopes is not None}


def load_api_keys(path: str | Path) -> ApiKeys:
    """Read a keys file (``.toml``, else JSON: ``{"keys": [...]}``); every problem is a
    :class:`KeysFileError` naming the file, the entry and the field."""
    path = Path(path)
    _check_permissions(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise KeysFileError(f"{path}: cannot read the keys file: {exc}") from None
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise KeysFileError(f"{path}: expected a non-empty list 'keys' ([[keys]] tables in TOML)")
    if set(data) != {"keys"}:
        raise KeysFileError(f"{path}: unknown top-level entries {sorted(set(data) - {'keys'})}")
    by_hash: dict[str, ApiKey] = {}
    names: set[str] = set()
    for number, entry in enumerate(entries):
        try:
            key = ApiKey.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise KeysFileError(f"{path}: keys[{number}]: {problems}") from None
        if key.sha256 in by_hash or key.name in names:
            raise KeysFileError(f"{path}: keys[{number}] ({key.name!r}) repeats the name or the sha256 of an earlier key")
        by_hash[key.sha256] = key
        names.add(key.name)
    return ApiKeys(by_hash)


def _check_permissions(path: Path) -> None:
    """Refuse a keys file that users other than its owner may change (any of them could add a key
    of any tenant, or a writer); warn where they may read it (the hashes of short keys can be
    guessed offline)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise KeysFileError(f"{path}: cannot read the keys file: {exc}") from None
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise KeysFileError(
            f"{path}: the keys file is writable by other users (mode {stat.filemode(mode)}): "
            f"anyone who may change it may add a key; chmod go-w {path}"
        )
    if mode & stat.S_IROTH:
        log.warning("%s: the keys file is readable by every user (mode %s): chmod o-r %s", path, stat.filemode(mode), path)
