"""Record-side scope extractors ([record_scope]) and the per-rule missing-scope report.

No store and no model: the extractors on records, the policy file format, the layout and
Stage-2 lookups over plain dicts (DictStore), and the LLM extractor through the real
``openai`` client against a fake chat server on loopback.
"""

from __future__ import annotations

import json
import re

import pytest

from car_rag import Policy, PolicyError, builtin_policies, load_policy
from car_rag.adapters import DictStore, RecordLayout
from car_rag.extractors import ScopeExtractor, missing_scope
from car_rag.policy import RecordScope
from fake_openai import FakeOpenAIServer
from helpers_records import rec, retrieved

POLICY_TOML = """
name = "advisories"
scope_keys = ["package", "cve_id"]
case_insensitive_keys = ["cve_id"]

[scope_patterns]
cve_id = '(?i)\\b(CVE-\\d{4}-\\d{4,})\\b'

[[rules]]
name = "patch_fixes_disclosure"
trigger = "patch_release"
target = "vulnerability_disclosure"
within = ["package", "cve_id"]
"""

EXTRACTORS_TOML = """
[record_scope.metadata_fields]
pkg = "package"

[record_scope.patterns]
cve_id = '(?i)\\b(CVE-\\d{4}-\\d{4,})\\b'
"""


def write_policy(tmp_path, extra: str = EXTRACTORS_TOML, name: str = "policy.toml"):
    path = tmp_path / name
    path.write_text(POLICY_TOML + extra, encoding="utf-8")
    return path


@pytest.fixture
def policy(tmp_path) -> Policy:
    return load_policy(write_policy(tmp_path))


def disclosure(doc_id: str = "d1", text: str = "cve-2099-0001: prototype pollution in merge.", **fields):
    return rec(doc_id, "vulnerability_disclosure", at=0, text=text, **fields)


def release(doc_id: str = "r1", text: str = "Release 4.17.99 fixes CVE-2099-0001 and CVE-2099-0002.", **fields):
    return rec(doc_id, "patch_release", at=5, text=text, **fields)


# --------------------------------------------------------------------------- the policy file


@pytest.mark.parametrize("name", builtin_policies())
def test_builtin_policies_have_no_extractors_and_read_stored_configs_unchanged(name):
    policy = load_policy(name)
    assert policy.record_scope == RecordScope() and not policy.record_scope.enabled
    # A store made before record_scope existed keeps its policy as JSON without the field.
    stored = json.loads(policy.model_dump_json())
    del stored["record_scope"]
    assert Policy.model_validate(stored) == policy
    records = [rec("a", "x", scope={"k": "v"})]
    assert ScopeExtractor(policy).fill(records).records == records


def test_extractors_load_from_toml(policy):
    assert policy.record_scope.metadata_fields == {"pkg": "package"}
    assert set(policy.record_scope.patterns) == {"cve_id"}
    assert policy.record_scope.llm is None and policy.record_scope.enabled


def test_a_regex_that_does_not_compile_names_the_policy_field(tmp_path):
    path = write_policy(tmp_path, "[record_scope.patterns]\ncve_id = '(CVE-\\d+'\n")
    with pytest.raises(PolicyError, match=r"record_scope\.patterns\['cve_id'\] is not a valid regex.*missing \)"):
        load_policy(path)


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("[record_scope.patterns]\ncve = 'CVE'\n", "record_scope.patterns.cve"),
        ("[record_scope.metadata_fields]\npkg = 'pkg_name'\n", "record_scope.metadata_fields.pkg"),
        ("[record_scope.llm]\nbase_url = 'http://x/v1'\nmodel = 'm'\nkeys = ['ghsa']\n", "record_scope.llm.keys"),
    ],
)
def test_an_extractor_for_a_key_the_policy_lacks_is_an_error_naming_it(tmp_path, extra, where):
    with pytest.raises(PolicyError, match=rf"{where}: names key .* not in scope_keys"):
        load_policy(write_policy(tmp_path, extra))


def test_a_misspelt_extractor_table_is_an_error(tmp_path):
    with pytest.raises(PolicyError, match=r"record_scope\.regexes: Extra inputs are not permitted"):
        load_policy(write_policy(tmp_path, "[record_scope.regexes]\ncve_id = 'CVE'\n"))


# --------------------------------------------------------------------------- filling scope


def test_records_without_scope_are_filled_from_text_and_metadata(policy):
    done = ScopeExtractor(policy).fill([disclosure(metadata={"pkg": "lodash"}), release(metadata={"pkg": "lodash"})])
    assert done.errors == [] and done.warnings == []
    # first group of the first match; cve_id is case-insensitive, so upper-cased like a question's id
    assert [r.scope for r in done.records] == [{"package": "lodash", "cve_id": "CVE-2099-0001"}] * 2
    assert done.filled == {"metadata_fields": 2, "patterns": 2}
    assert policy.rules[0].fires(done.records[1], done.records[0])


def test_a_records_own_scope_always_wins(policy):
    own = release(scope={"package": "lodash", "cve_id": "CVE-2099-0002"}, metadata={"pkg": "underscore"})
    done = ScopeExtractor(policy).fill([own])
    assert done.records == [own] and done.filled == {}
    partial = release(scope={"cve_id": "CVE-2099-0002"}, metadata={"pkg": "lodash"})
    assert ScopeExtractor(policy).fill([partial]).records[0].scope == {"cve_id": "CVE-2099-0002", "package": "lodash"}


def test_metadata_fields_are_tried_before_patterns(tmp_path):
    mapped = EXTRACTORS_TOML.replace('pkg = "package"', 'pkg = "package"\nadvisory = "cve_id"')
    policy = load_policy(write_policy(tmp_path, mapped))
    done = ScopeExtractor(policy).fill([release(metadata={"advisory": "CVE-2099-7777", "pkg": 12})])
    assert done.records[0].scope == {"cve_id": "CVE-2099-7777", "package": "12"}  # an integer id reads as text
    assert done.filled == {"metadata_fields": 2}


def test_a_metadata_value_that_is_not_one_identifier_rejects_that_record_only(policy):
    done = ScopeExtractor(policy).fill(
        [release("bad", metadata={"pkg": ["lodash", "underscore"]}), release("good", metadata={"pkg": "lodash"})],
        source="corpus.jsonl",
        lines={"bad": 7},
    )
    assert [r.doc_id for r in done.records] == ["good"]
    (error,) = done.errors
    assert (error.doc_id, error.field, error.line) == ("bad", "metadata.pkg", 7)
    assert str(error).startswith("corpus.jsonl:7: record 'bad' field 'metadata.pkg': record_scope.metadata_fields maps")
    assert "list" in error.message


def test_a_mapped_field_that_no_record_has_is_a_warning(policy):
    done = ScopeExtractor(policy).fill([release(metadata={"package_name": "lodash"})], source="corpus.jsonl")
    assert done.warnings == [
        "record_scope.metadata_fields.pkg: no record in corpus.jsonl has metadata field 'pkg' (it fills scope key 'package')"
    ]
    assert ScopeExtractor(policy).fill([]).warnings == []  # an empty input says nothing about the mapping


def test_a_pattern_without_a_match_leaves_the_key_missing(policy):
    quiet = rec("n", "vulnerability_disclosure", text="A flaw in merge.", metadata={"pkg": "lodash"})
    assert ScopeExtractor(policy).fill([quiet]).records[0].scope == {"package": "lodash"}


# --------------------------------------------------------------------------- missing scope


def test_missing_scope_is_reported_per_rule_for_the_types_it_concerns(policy):
    records = [disclosure(), release(), rec("other", "changelog"), release("r2", scope={"package": "x", "cve_id": "C"})]
    (gap,) = missing_scope(policy, records)
    assert (gap.rule, gap.doc_ids) == ("patch_fixes_disclosure", ("d1", "r1"))
    assert str(gap) == "rule patch_fixes_disclosure cannot fire for 2 records: no package, no cve_id"
    filled = ScopeExtractor(policy).fill([disclosure(metadata={"pkg": "lodash"}), release()]).records
    assert [str(g) for g in missing_scope(policy, filled)] == ["rule patch_fixes_disclosure cannot fire for 1 record: no package"]
    assert missing_scope(load_policy("security-advisory"), []) == []


# --------------------------------------------------------------------------- frameworks' own metadata names


def _user_items(with_names: dict[str, str]) -> dict[str, tuple[dict, str]]:
    """Metadata as a framework user writes it: their own names, no car_* keys."""
    return {
        "d1": (
            {"doc_id": "d1", "doc_type": "vulnerability_disclosure", "published_at": "2024-01-01", **with_names},
            "CVE-2099-0001: prototype pollution in merge.",
        ),
        "r1": ({"doc_id": "r1", "doc_type": "patch_release", "published_at": "2024-02-01", **with_names}, "Release 4.17.99."),
    }


def test_layout_reads_scope_from_the_mapped_metadata_field_and_the_scope_key_wins(policy):
    layout = RecordLayout()
    record = layout.record({"doc_id": "a", "doc_type": "patch_release", "pkg": "lodash"}, "t", policy)
    assert record.scope == {"package": "lodash"} and record.metadata == {"pkg": "lodash"}
    both = layout.record({"doc_id": "a", "doc_type": "patch_release", "pkg": "lodash", "package": "own"}, "t", policy)
    assert both.scope == {"package": "own"}


def test_stage2_finds_superseders_stored_under_the_frameworks_metadata_names(tmp_path):
    names = {"pkg": "lodash", "advisory": "CVE-2099-0001"}
    mapped = load_policy(write_policy(tmp_path, '[record_scope.metadata_fields]\npkg = "package"\nadvisory = "cve_id"\n'))
    unmapped = load_policy(write_policy(tmp_path, "", "plain.toml"))
    result = DictStore(_user_items(names)).resolve(mapped, "Is merge still polluting prototypes?", ["d1"])
    assert [(r.doc_id, r.status) for r in result] == [("r1", "active"), ("d1", "superseded")]
    assert retrieved(result, "d1").voided_by[0].rule == "patch_fixes_disclosure"
    # Without the mapping the same store looks like records with no scope: nothing voids the disclosure.
    result = DictStore(_user_items(names)).resolve(unmapped, "Is merge still polluting prototypes?", ["d1"])
    assert [(r.doc_id, r.status) for r in result] == [("d1", "active")]


# --------------------------------------------------------------------------- the LLM extractor


LLM_TOML = """
[record_scope.patterns]
cve_id = '(?i)\\b(CVE-\\d{{4}}-\\d{{4,}})\\b'

[record_scope.llm]
base_url = "{url}"
model = "fake-scope-model"
keys = ["package"]
timeout_s = {timeout}
max_retries = 0
"""


def llm_policy(tmp_path, server: FakeOpenAIServer, timeout: float = 5.0) -> Policy:
    return load_policy(write_policy(tmp_path, LLM_TOML.format(url=server.base_url, timeout=timeout)))


def packages(messages) -> str:
    """The fake's answer: the package named after 'in ' in the document, as the schema asks."""
    text = messages[-1]["content"]
    name = text.split(" in ", 1)[1].split()[0].strip(".") if " in " in text else None
    return json.dumps({"package": name})


def test_the_llm_fills_only_the_keys_still_missing_validated_and_cached(tmp_path):
    with FakeOpenAIServer(answer=packages) as server:
        policy = llm_policy(tmp_path, server)
        cache = tmp_path / "cache"
        records = [
            disclosure(text="CVE-2099-0001: prototype pollution in lodash merge."),
            release(text="Release 4.17.99 in lodash fixes CVE-2099-0001.", scope={"package": "own"}),
        ]
        done = ScopeExtractor(policy, cache_dir=cache).fill(records)
        assert done.errors == []
        assert [r.scope for r in done.records] == [
            {"cve_id": "CVE-2099-0001", "package": "lodash"},
            {"package": "own", "cve_id": "CVE-2099-0001"},
        ]
        assert done.filled == {"patterns": 2, "llm": 1}
        (request,) = server.requests  # the record with its own package asked nothing
        assert request["model"] == "fake-scope-model" and request["temperature"] == 0
        schema = request["response_format"]["json_schema"]["schema"]
        assert request["response_format"]["type"] == "json_schema"
        assert set(schema["properties"]) == {"package"} and schema["required"] == ["package"]
        assert schema["additionalProperties"] is False
        assert "prototype pollution in lodash merge" in request["messages"][-1]["content"]
        # A second extractor over the same cache sends nothing: answers are keyed by model, keys and text.
        again = ScopeExtractor(policy, cache_dir=cache).fill(records[:1])
        assert again.records == done.records[:1] and len(server.requests) == 1


def test_json_object_sends_the_schema_in_the_form_llama_cpp_servers_take(tmp_path):
    """llama-cpp-python's server refuses OpenAI's ``json_schema`` form and takes ``json_object`` with a schema."""
    with FakeOpenAIServer(answer=packages) as server:
        toml = LLM_TOML.format(url=server.base_url, timeout=5.0) + 'response_format = "json_object"\n'
        policy = load_policy(write_policy(tmp_path, toml))
        done = ScopeExtractor(policy, cache_dir=tmp_path / "cache").fill(
            [disclosure(text="CVE-2099-0001: a flaw in lodash merge.")]
        )
        assert [r.scope["package"] for r in done.records] == ["lodash"]
        (request,) = server.requests
        assert request["response_format"]["type"] == "json_object"
        assert request["response_format"]["schema"]["required"] == ["package"]


def test_the_llm_saying_null_leaves_the_key_missing(tmp_path):
    with FakeOpenAIServer(answer=lambda messages: '{"package": null}') as server:
        done = ScopeExtractor(llm_policy(tmp_path, server), cache_dir=tmp_path / "c").fill([disclosure()])
    assert done.errors == [] and done.records[0].scope == {"cve_id": "CVE-2099-0001"}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("The package is lodash.", r"returned 'The package is lodash\.', not JSON with keys \['package'\]: Invalid JSON"),
        ('{"package": "lodash", "extra": 1}', r"not JSON with keys \['package'\]: extra: Extra inputs are not permitted"),
        ('{"name": "lodash"}', r"package: Field required"),
    ],
)
def test_llm_output_off_the_schema_rejects_that_record_names_it_and_is_not_cached(tmp_path, reply, message):
    def answer(messages):  # the disclosure gets the bad reply
        return reply if "merge" in messages[-1]["content"] else '{"package": "x"}'

    with FakeOpenAIServer(answer=answer) as server:
        extractor = ScopeExtractor(llm_policy(tmp_path, server), cache_dir=tmp_path / "c")
        done = extractor.fill([disclosure("d-bad"), release("r-good")], source="feed.jsonl", lines={"d-bad": 3})
        assert [r.doc_id for r in done.records] == ["r-good"]
        (error,) = done.errors
        assert (error.doc_id, error.line, error.field) == ("d-bad", 3, "scope")
        assert error.message.startswith("LLM scope extractor (fake-scope-model) returned")
        assert re.search(message, error.message), error.message
        extractor.fill([disclosure("d-bad")])
        assert len(server.requests) == 3  # the failed answer was not cached: asked again


def test_an_llm_that_times_out_rejects_that_record_naming_it(tmp_path):
    with FakeOpenAIServer(answer=packages, delay=1.5) as server:
        extractor = ScopeExtractor(llm_policy(tmp_path, server, timeout=0.3), cache_dir=tmp_path / "c")
        done = extractor.fill([disclosure("slow")])  # had it waited for the answer (1.5 s), the record would be kept
    (error,) = done.errors
    assert error.doc_id == "slow" and done.records == []
    assert error.message == f"LLM scope extractor (fake-scope-model at {server.base_url}) timed out after 0.3 s"
