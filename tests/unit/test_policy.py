"""Policies: built-ins, user files, validation errors, scope extraction and rule firing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from car_rag.policy import EXPLICIT_RULE, Policy, PolicyError, Rule, builtin_policies, load_policy, version_is_higher
from helpers_records import policy_rule, rec

BUILTINS = ["drug-regulation", "legal-precedent", "sec-204a1", "security-advisory", "versioned-document"]

USER_TOML = """
name = "sop"
description = "Standard operating procedures."
scope_keys = ["sop_id", "site"]

[scope_patterns]
sop_id = 'SOP-\\d+'

[[rules]]
name = "revision"
trigger = "sop"
target = "sop"
within = ["sop_id", "site"]
order = "higher_version"

[[rules]]
name = "withdrawal"
trigger = "sop_withdrawn"
target = "sop"
within = ["sop_id"]
"""


# --------------------------------------------------------------------------- built-ins


def test_builtin_policies_lists_the_five():
    assert builtin_policies() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_policy_loads(name):
    policy = load_policy(name)
    assert isinstance(policy, Policy)
    assert policy.name == name
    assert policy.rules, "a built-in policy without rules is useless"
    for rule in policy.rules:
        assert set(rule.within) <= set(policy.scope_keys)


def test_sec_204a1_has_the_paper_rules_r1_to_r10_then_the_blackout_exception():
    policy = load_policy("sec-204a1")
    assert [r.name for r in policy.rules] == [f"R{i}" for i in range(1, 11)] + ["blackout_exception"]
    assert all(r.order == "later" for r in policy.rules)
    scopes = {r.name: r.within for r in policy.rules}
    assert scopes["R1"] == ("ticker",)
    assert scopes["R3"] == ("employee", "ticker")
    assert scopes["R7"] == ("employee",)
    assert scopes["R10"] == ()
    assert policy_rule(policy, "R2").trigger == "blackout_lifted" and policy_rule(policy, "R2").target == "blackout_announced"
    assert policy.rule("R11") is None


def test_load_policy_passes_a_policy_object_through():
    policy = load_policy("security-advisory")
    assert load_policy(policy) is policy


# --------------------------------------------------------------------------- user files


def test_load_policy_from_user_toml(tmp_path):
    path = tmp_path / "sop.toml"
    path.write_text(USER_TOML, encoding="utf-8")
    for arg in (path, str(path)):
        policy = load_policy(arg)
        assert policy.name == "sop"
        assert policy.scope_keys == ("sop_id", "site")
        assert [r.name for r in policy.rules] == ["revision", "withdrawal"]
        assert policy_rule(policy, "revision").order == "higher_version"
        assert policy_rule(policy, "withdrawal").order == "any"
        assert policy.scope_ids_in("see SOP-12 and SOP-7, SOP-12 again") == {"sop_id": ["SOP-12", "SOP-7"]}


def test_load_policy_from_json(tmp_path):
    data = {
        "name": "contracts",
        "scope_keys": ["contract"],
        "rules": [
            {"name": "amend", "trigger": "amendment", "target": "contract", "within": ["contract"]},
            {"name": "renew", "trigger": "contract", "target": "contract", "within": ["contract"], "order": "later"},
        ],
    }
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    policy = load_policy(path)
    assert policy.name == "contracts"
    assert policy_rule(policy, "amend").within == ("contract",)
    assert policy_rule(policy, "renew").order == "later"
    a = rec("c1", "contract", at=1, scope={"contract": "K"})
    b = rec("a1", "amendment", at=0, scope={"contract": "K"})
    assert policy.edges_between(b, a) == ["amend"]
    assert policy.edges_between(a, b) == []


# --------------------------------------------------------------------------- errors


def test_unknown_policy_name():
    with pytest.raises(PolicyError, match=r"unknown policy 'no-such-policy'") as exc:
        load_policy("no-such-policy")
    assert "security-advisory" in str(exc.value)  # lists the choices


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_missing_policy_file(tmp_path, suffix):
    path = tmp_path / f"absent{suffix}"
    with pytest.raises(PolicyError, match="policy file not found") as exc:
        load_policy(path)
    assert str(path) in str(exc.value)


def test_bad_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\nscope_keys = ["a"\n', encoding="utf-8")
    with pytest.raises(PolicyError, match="cannot parse") as exc:
        load_policy(path)
    assert str(path) in str(exc.value)


def test_bad_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x", ', encoding="utf-8")
    with pytest.raises(PolicyError, match="cannot parse"):
        load_policy(path)


def _write(tmp_path, body: str):
    path = tmp_path / "p.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_rule_with_key_not_in_scope_keys(tmp_path):
    path = _write(
        tmp_path,
        'name = "p"\nscope_keys = ["a"]\n[[rules]]\nname = "r"\ntrigger = "x"\ntarget = "y"\nwithin = ["a", "zzz"]\n',
    )
    with pytest.raises(PolicyError, match=r"invalid policy") as exc:
        load_policy(path)
    msg = str(exc.value)
    assert "'r'" in msg and "zzz" in msg and "scope_keys" in msg


def test_duplicate_rule_names(tmp_path):
    path = _write(
        tmp_path,
        'name = "p"\nscope_keys = ["a"]\n'
        '[[rules]]\nname = "dup"\ntrigger = "x"\ntarget = "y"\nwithin = ["a"]\n'
        '[[rules]]\nname = "dup"\ntrigger = "z"\ntarget = "y"\nwithin = ["a"]\n',
    )
    with pytest.raises(PolicyError, match="unique") as exc:
        load_policy(path)
    assert "dup" in str(exc.value)


@pytest.mark.parametrize("trigger, target", [("x", "x"), ("*", "y"), ("x", "*")])
def test_same_type_rule_with_order_any_is_rejected(tmp_path, trigger, target):
    path = _write(
        tmp_path,
        f'name = "p"\nscope_keys = ["a"]\n[[rules]]\nname = "selfish"\ntrigger = "{trigger}"\ntarget = "{target}"\n'
        'within = ["a"]\norder = "any"\n',
    )
    with pytest.raises(PolicyError, match="selfish") as exc:
        load_policy(path)
    assert "order" in str(exc.value)


@pytest.mark.parametrize("order", ["later", "higher_version"])
def test_same_type_rule_with_an_order_is_fine(order):
    rule = Rule(name="r", trigger="x", target="x", within=("a",), order=order)
    assert rule.order == order


def test_unknown_order_and_unknown_policy_field(tmp_path):
    path = _write(
        tmp_path,
        'name = "p"\nscope_keys = ["a"]\n[[rules]]\nname = "r"\ntrigger = "x"\ntarget = "y"\norder = "sooner"\n',
    )
    with pytest.raises(PolicyError, match="rules.0.order"):
        load_policy(path)
    path = _write(tmp_path, 'name = "p"\nscope_keys = ["a"]\nscope_key = ["b"]\n')
    with pytest.raises(PolicyError, match="scope_key"):
        load_policy(path)


def test_policy_without_scope_keys_is_rejected(tmp_path):
    with pytest.raises(PolicyError, match="scope_keys"):
        load_policy(_write(tmp_path, 'name = "p"\nscope_keys = []\n'))


def test_bad_scope_pattern(tmp_path):
    body = 'name = "p"\nscope_keys = ["a"]\n[scope_patterns]\na = "(unclosed"\n'
    with pytest.raises(PolicyError, match="not a valid regex"):
        load_policy(_write(tmp_path, body))
    body = 'name = "p"\nscope_keys = ["a"]\n[scope_patterns]\nb = "x"\n'
    with pytest.raises(PolicyError, match="'b'"):
        load_policy(_write(tmp_path, body))


# --------------------------------------------------------------------------- scope ids


def test_scope_ids_in_extracts_cve_ids_case_insensitively():
    policy = load_policy("security-advisory")
    query = "Is cve-2019-10744 still unpatched? Compare CVE-2020-8203, and Cve-2019-10744 again."
    assert policy.scope_ids_in(query) == {"cve_id": ["CVE-2019-10744", "CVE-2020-8203"]}
    assert policy.scope_ids_in("is lodash prototype pollution fixed?") == {}
    # too few digits in the sequence part, and embedded in a word: not a CVE id
    assert policy.scope_ids_in("CVE-2019-123 and XCVE-2019-12345") == {}


def test_scope_ids_in_drug_ndc():
    policy = load_policy("drug-regulation")
    assert policy.scope_ids_in("recall for NDC 0409-4888-02 or 12345-678?") == {"ndc": ["0409-4888-02", "12345-678"]}


def test_scope_ids_in_uses_whole_match_without_group():
    policy = Policy(name="p", scope_keys=("ticket",), scope_patterns={"ticket": r"[A-Z]+-\d+"})
    assert policy.scope_ids_in("fix ABC-1 and ABC-22") == {"ticket": ["ABC-1", "ABC-22"]}


# --------------------------------------------------------------------------- Rule.fires


def test_fires_needs_matching_types():
    rule = Rule(name="r", trigger="patch", target="disclosure", within=("pkg",))
    p = rec("p", "patch", scope={"pkg": "x"})
    d = rec("d", "disclosure", scope={"pkg": "x"})
    assert rule.fires(p, d)
    assert not rule.fires(d, p)
    assert not rule.fires(p, rec("n", "note", scope={"pkg": "x"}))
    assert rule.label() == "patch⊳disclosure"


def test_fires_honours_within_keys():
    rule = Rule(name="r", trigger="patch", target="disclosure", within=("pkg", "cve"))
    p = rec("p", "patch", scope={"pkg": "x", "cve": "C1"})
    assert rule.fires(p, rec("d1", "disclosure", scope={"pkg": "x", "cve": "C1", "extra": "ignored"}))
    assert not rule.fires(p, rec("d2", "disclosure", scope={"pkg": "x", "cve": "C2"}))
    assert not rule.fires(p, rec("d3", "disclosure", scope={"pkg": "y", "cve": "C1"}))
    assert not rule.fires(p, rec("d4", "disclosure", scope={"pkg": "x"}))  # key missing on target
    bare = rec("p2", "patch", scope={"cve": "C1"})
    assert not rule.fires(bare, rec("d5", "disclosure", scope={"cve": "C1"}))  # key missing on both


def test_fires_global_rule_ignores_scope():
    rule = Rule(name="R10", trigger="policy_update", target="policy_acknowledged", order="later")
    upd = rec("u", "policy_update", at=5)
    assert rule.fires(upd, rec("a", "policy_acknowledged", at=1, scope={"employee": "e1"}))
    assert not rule.fires(upd, rec("b", "policy_acknowledged", at=9, scope={"employee": "e1"}))


def test_wildcard_rule_matches_any_type():
    rule = Rule(name="v", trigger="*", target="*", within=("document",), order="higher_version")
    a = rec("a", "memo", version="1.0", scope={"document": "D"})
    b = rec("b", "sop", version="2.0", scope={"document": "D"})
    assert rule.fires(b, a) and not rule.fires(a, b)


def test_fires_never_on_itself():
    rule = Rule(name="r", trigger="*", target="*", order="later")
    a = rec("a", at=1)
    assert not rule.fires(a, a)
    assert not rule.fires(a, a.model_copy(update={"published_at": datetime(2000, 1, 1, tzinfo=UTC)}))


def test_order_later():
    rule = Rule(name="r", trigger="x", target="y", order="later")
    assert rule.fires(rec("t", "x", at=2), rec("u", "y", at=1))
    assert not rule.fires(rec("t", "x", at=1), rec("u", "y", at=1))  # equal: not strictly later
    assert not rule.fires(rec("t", "x", at=1), rec("u", "y", at=2))
    assert not rule.fires(rec("t", "x"), rec("u", "y", at=1))  # trigger undated
    assert not rule.fires(rec("t", "x", at=2), rec("u", "y"))  # target undated
    assert not rule.fires(rec("t", "x"), rec("u", "y"))


def test_order_later_uses_effective_date():
    rule = Rule(name="r", trigger="x", target="y", order="later")
    # published later but effective earlier than the target's publication: does not fire
    trig = rec("t", "x", at=10, effective_at=datetime(2023, 6, 1, tzinfo=UTC))
    assert not rule.fires(trig, rec("u", "y", at=1))
    trig2 = rec("t2", "x", at=0, effective_at=datetime(2025, 1, 1, tzinfo=UTC))
    assert rule.fires(trig2, rec("u", "y", at=1))


def test_order_later_naive_and_aware_dates_compare():
    rule = Rule(name="r", trigger="x", target="y", order="later")
    trig = rec("t", "x", published_at="2024-01-02T00:00:00")  # naive -> UTC
    targ = rec("u", "y", published_at="2024-01-02T00:30:00+01:00")  # = 2024-01-01T23:30Z
    assert rule.fires(trig, targ)


@pytest.mark.parametrize(
    "higher, lower",
    [
        ("2.0", "1.0"),
        ("1.10", "1.9"),  # PEP 440, not string order
        ("1.0.1", "1.0"),
        ("2.0", "2.0rc1"),
        ("v3", "v2"),
        ("2024-R3", "2024-R2"),
        ("2024-R10", "2024-R9"),
        ("rev 12 / draft", "rev 3 / final"),  # neither PEP 440: numeric parts
        ("Edition 2025", "Edition 2024"),
    ],
)
def test_version_is_higher(higher, lower):
    assert version_is_higher(higher, lower)
    assert not version_is_higher(lower, higher)
    assert not version_is_higher(higher, higher)


def test_version_without_numbers_is_unordered():
    assert not version_is_higher("draft", "final")
    assert not version_is_higher("final", "draft")
    assert not version_is_higher("1.0", "1.0.0")  # equal under PEP 440


VERSION_POOL = ["1.0", "1.0rc1", "1.0.0-draft", "2024-R2", "2024-R3", "rev 12", "3.1", "3.1a1", "3.1.0 (2024)", "draft"]


def test_version_is_higher_is_asymmetric():
    for a in VERSION_POOL:
        assert not version_is_higher(a, a)
        for b in VERSION_POOL:
            assert not (version_is_higher(a, b) and version_is_higher(b, a)), (a, b)


def test_version_is_higher_is_transitive():
    bad = [
        (a, b, c)
        for a in VERSION_POOL
        for b in VERSION_POOL
        for c in VERSION_POOL
        if version_is_higher(a, b) and version_is_higher(b, c) and not version_is_higher(a, c)
    ]
    assert bad == []


def test_order_higher_version():
    rule = Rule(name="r", trigger="*", target="*", within=("document",), order="higher_version")
    v = lambda i, ver: rec(f"d{i}", "policy_doc", version=ver, scope={"document": "HR"})  # noqa: E731
    assert rule.fires(v(1, "1.10"), v(2, "1.9"))
    assert not rule.fires(v(1, "1.9"), v(2, "1.10"))
    assert rule.fires(v(1, "2024-R3"), v(2, "2024-R2"))
    assert not rule.fires(v(1, "2024-R2"), v(2, "2024-R3"))
    assert not rule.fires(v(1, "2.0"), v(2, "2.0"))
    assert not rule.fires(v(1, "2.0"), rec("n", "policy_doc", scope={"document": "HR"}))  # target has no version
    assert not rule.fires(rec("n", "policy_doc", scope={"document": "HR"}), v(2, "1.0"))
    # version order does not look at dates
    assert rule.fires(
        rec("a", "x", at=1, version="3", scope={"document": "HR"}), rec("b", "x", at=9, version="2", scope={"document": "HR"})
    )


def test_edges_between_lists_explicit_first_then_rules():
    policy = load_policy("security-advisory")
    scope = {"package": "lodash", "cve_id": "CVE-2019-10744"}
    d = rec("d", "vulnerability_disclosure", at=1, scope=scope)
    p1 = rec("p1", "patch_release", at=2, scope=scope, supersedes=["d"])
    p2 = rec("p2", "patch_release", at=3, scope=scope)
    assert policy.edges_between(p1, d) == [EXPLICIT_RULE, "patch_fixes_disclosure"]
    assert policy.edges_between(p2, p1) == ["later_patch"]
    assert policy.edges_between(p1, p2) == []
    assert policy.edges_between(d, p1) == []
    assert EXPLICIT_RULE == "explicit"


# ------------------------------------------------------------------------ bad input (issue "Bad input and measurement integrity")

MINIMAL = 'name = "p"\nscope_keys = ["a"]\n'


def test_a_policy_file_without_rules_must_say_rules_is_empty(tmp_path):
    """A rule-less policy is legitimate (explicit `supersedes` edges count under any policy),
    but a forgotten [[rules]] section must not load as a policy that voids nothing."""
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(PolicyError) as exc:
        load_policy(path)
    assert str(exc.value).startswith(f"{path}: invalid policy: rules: missing") and "rules = []" in str(exc.value)
    policy = load_policy(_write(tmp_path, MINIMAL + "rules = []\n"))
    assert policy.rules == ()
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"name": "p", "scope_keys": ["a"]}), encoding="utf-8")
    with pytest.raises(PolicyError, match="rules: missing"):
        load_policy(path)


def test_under_a_rule_less_policy_explicit_edges_still_supersede():
    from car_rag.graph import AuthorityGraph

    graph = AuthorityGraph(Policy(name="explicit-only", scope_keys=("document",), rules=()))
    graph.add(rec("v1", "sop", at=1, scope={"document": "SOP-1"}))
    edges = graph.add(rec("v2", "sop", at=2, scope={"document": "SOP-1"}, supersedes=["v1"]))
    assert [(e.superseder, e.target, e.rule) for e in edges] == [("v2", "v1", EXPLICIT_RULE)]
    assert graph.frontier(["v1", "v2"]) == {"v2"}


@pytest.mark.parametrize(
    "keys, message",
    [
        ('["a", "b", "a"]', "scope keys must be unique, repeated: ['a']"),
        ('["a", ""]', "scope keys must not be empty or white space, got ['']"),
        ('["a", "  "]', "scope keys must not be empty or white space, got ['  ']"),
    ],
)
def test_duplicate_or_blank_scope_keys_are_rejected_naming_file_and_field(tmp_path, keys, message):
    path = _write(tmp_path, f'name = "p"\nscope_keys = {keys}\nrules = []\n')
    with pytest.raises(PolicyError) as exc:
        load_policy(path)
    assert str(exc.value).startswith(f"{path}: invalid policy: scope_keys: ") and message in str(exc.value)


def test_case_insensitive_key_not_in_scope_keys_is_rejected(tmp_path):
    path = _write(tmp_path, MINIMAL + 'rules = []\ncase_insensitive_keys = ["cve"]\n')
    with pytest.raises(PolicyError, match="case_insensitive_keys: names key 'cve' that is not in scope_keys"):
        load_policy(path)


def test_rule_naming_an_unknown_key_names_the_rule_field(tmp_path):
    path = _write(tmp_path, MINIMAL + '[[rules]]\nname = "r"\ntrigger = "x"\ntarget = "y"\nwithin = ["zzz"]\n')
    with pytest.raises(PolicyError, match=r"rules\.0\.within: rule 'r' uses keys \['zzz'\]"):
        load_policy(path)


@pytest.mark.parametrize("pattern", ["a{4294967296}", "(" * 5000 + ")" * 5000])
def test_regexes_that_fail_outside_re_error_are_policy_errors(tmp_path, pattern):
    """A huge repeat count raises OverflowError and deep nesting RecursionError, not re.error."""
    path = tmp_path / "p.json"
    data = {"name": "p", "scope_keys": ["a"], "rules": [], "scope_patterns": {"a": pattern}}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PolicyError, match=r"scope_patterns\['a'\] is not a valid regex"):
        load_policy(path)


def test_state_term_is_checked_as_the_claim_reader_embeds_it(tmp_path):
    """'(?i)patched' compiles alone, not inside the group the claim reader puts it in."""
    body = MINIMAL + 'rules = []\n[states.patched]\ndoc_types = ["patch"]\nterms = ["(?i)patched"]\n'
    with pytest.raises(PolicyError, match=r"terms\[0\] is not a valid regex"):
        load_policy(_write(tmp_path, body))


def test_states_that_are_not_a_table_beside_a_vocabulary_are_a_policy_error(tmp_path):
    with pytest.raises(PolicyError, match="states: must be a table"):
        load_policy(_write(tmp_path, MINIMAL + 'rules = []\nvocabulary = ["security"]\nstates = [1]\n'))


def test_policy_file_encoding_and_nesting(tmp_path):
    path = tmp_path / "p.toml"
    path.write_bytes(b'name = "caf\xe9"\nscope_keys = ["a"]\nrules = []\n')
    with pytest.raises(PolicyError, match=rf"{path}: cannot parse: not UTF-8"):
        load_policy(path)
    path.write_bytes(b"\xef\xbb\xbf" + (MINIMAL + "rules = []\n").encode())  # a byte-order mark is not the policy
    assert load_policy(path).name == "p"
    path = tmp_path / "p.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(PolicyError, match="nested too deeply"):
        load_policy(path)
