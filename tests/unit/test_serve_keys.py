"""The API keys file of `car-rag serve`: keys stored hashed, each mapped to a caller; every
problem names the entry and field (no FastAPI needed)."""

from __future__ import annotations

import json

import pytest

from car_rag.eligibility import CallerContext
from car_rag.serve.keys import KeysFileError, hash_key, load_api_keys


def test_a_key_is_found_by_its_hash_and_reads_as_its_tenant(tmp_path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(f'''
[[keys]]
name = "acme"
sha256 = "{hash_key("secret-a").upper()}"
tenant = "acme"
principals = ["analyst"]
write = true

[[keys]]
name = "public"
sha256 = "{hash_key("secret-p")}"
''')
    keys = load_api_keys(path)
    acme = keys.lookup("secret-a")
    assert acme is not None and acme.write and acme.caller == CallerContext("acme", frozenset({"analyst"}))
    public = keys.lookup("secret-p")
    assert public is not None and not public.write and public.caller == CallerContext(None, frozenset())
    assert keys.lookup("secret-x") is None and keys.lookup(hash_key("secret-a")) is None  # the hash is not a key


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"name": "a", "sha256": "secret-in-clear"}], r"keys\[0\]: sha256: String should match pattern"),
        ([{"name": "a", "sha256": hash_key("k"), "tenant": "*"}], r"keys\[0\]: tenant: .*not '\*'"),
        ([{"name": "a", "sha256": hash_key("k"), "principals": [" "]}], r"keys\[0\]: principals: .*blank"),
        ([{"name": "a", "sha256": hash_key("k"), "tenat": "x"}], r"keys\[0\]: tenat: Extra inputs"),
        ([{"name": "a", "sha256": hash_key("k")}, {"name": "b", "sha256": hash_key("k")}], r"keys\[1\] \('b'\) repeats"),
        ([], r"non-empty list 'keys'"),
    ],
)
def test_a_bad_keys_file_is_named_by_entry_and_field(tmp_path, entries, message) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": entries}))
    with pytest.raises(KeysFileError, match=message):
        load_api_keys(path)


def test_an_unreadable_keys_file_is_named(tmp_path) -> None:
    with pytest.raises(KeysFileError, match="cannot read the keys file"):
        load_api_keys(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[[keys]\n")
    with pytest.raises(KeysFileError, match="bad.toml: cannot read"):
        load_api_keys(tmp_path / "bad.toml")
