"""A small mutation check: does the suite notice when the authority code is broken?

Each mutant changes one thing in one target module (below); it is written into a copy of the
tree and the module's killing tests run against it (``pytest -x``, the unit tier unless the
module needs more). A mutant the tests fail is killed; one they pass survives. The results,
with every survivor's line and change, go to ``evals/results/mutation/``.

    python evals/mutation/mutate.py                          # every target
    python evals/mutation/mutate.py car_rag/graph.py --list  # the mutants of one module, not run
    python evals/mutation/mutate.py --survivors              # again, only what survived the last run

Operators, on the module's AST (the module is unparsed from it, so formatting and comments
change, nothing else: the unmutated unparse must pass first): a comparison at its boundary or
flipped (< <=, > >=, == !=, in / not in, is / is not), and / or swapped, a ``not`` dropped,
True / False swapped, an int n made n + 1, + / - swapped, a slice's bound moved to the other
side (``[-n:]`` to ``[:n]``), the last positional argument of a call dropped (not of a log
call), break / continue swapped. Docstrings and annotations are left alone.

Why not mutmut: it rewrites every function into a trampoline and runs the tests from its own
copy of the package; a few hundred mutants of four modules with the tests that exercise them
need no more than this.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "evals" / "results" / "mutation"


@dataclass(frozen=True)
class Target:
    """A module, the tests that must notice its mutants (fastest and closest first: -x stops at the
    first failure), and optionally the only functions mutated (dotted, nested names included)."""

    tests: tuple[str, ...]
    functions: frozenset[str] = field(default_factory=frozenset)


UNIT = "tests/unit/"
SERVE_TENANCY = (
    "tests/integration/test_serve_inserts.py",
    "tests/integration/test_serve.py::test_writes_need_a_writer_key_for_their_own_tenant",
    "tests/integration/test_serve.py::test_a_bad_request_gets_a_clear_4xx_echoes_nothing_and_changes_nothing_stored",
)
TARGETS: dict[str, Target] = {
    "car_rag/graph.py": Target(
        tuple(
            UNIT + t
            for t in (
                "test_stage2_bounds.py",
                "test_graph_reading.py",
                "test_graph.py",
                "test_confidence.py",
                "test_multi_authority.py",
                "test_graph_properties.py",
                "test_policy.py",
                "test_lookup.py",
                "test_fanin.py",
                "test_latent_scope.py",
            )
        )
    ),
    "car_rag/resolution.py": Target(
        tuple(
            UNIT + t
            for t in (
                "test_stage2_bounds.py",
                "test_retrieval_result.py",
                "test_confidence.py",
                "test_multi_authority.py",
                "test_latent_scope.py",
                "test_graph_properties.py",
                "test_fanin.py",
                "test_plain_evidence.py",
                "test_reader_evidence.py",
            )
        )
    ),
    # who may read what: decided in memory (unit) and as Chroma's filter over stored metadata (integration)
    "car_rag/eligibility.py": Target(
        (
            *(
                UNIT + t
                for t in ("test_stage2_bounds.py", "test_serve_keys.py", "test_latent_scope.py", "test_plain_evidence.py")
            ),
            "tests/integration/test_eligibility.py",
        )
    ),
    "car_rag/claims.py": Target(
        tuple(
            UNIT + t
            for t in (
                "test_claims_mutation.py",
                "test_claim_reader.py",
                "test_claims.py",
                "test_guard.py",
                "test_classifier_agreement.py",
                "test_extras.py",
            )
        )
    ),
    # the serve tenancy checks: who may replace a record, what an insert's answer shows, the route's tenant check
    "car_rag/serve/inserts.py": Target(SERVE_TENANCY, frozenset({"_Owners.__call__", "Inserts._answer"})),
    "car_rag/serve/app.py": Target(SERVE_TENANCY, frozenset({"create_app.records"})),
}

_FLIP: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_LOG_CALLS = {"debug", "info", "warning", "error", "exception", "critical"}


class Mutator(ast.NodeTransformer):
    """Walks a module in a fixed order, numbering each possible mutation; applies number ``target``
    (or none: ``target`` -1 lists them in ``sites``)."""

    def __init__(self, target: int = -1, functions: frozenset[str] = frozenset()):
        self.target, self.functions = target, functions
        self.sites: list[tuple[int, str]] = []
        self.scope: list[str] = []

    def _site(self, node: ast.AST, what: str) -> bool:
        """Number a possible mutation at ``node``; True if it is the one to apply."""
        qualname = ".".join(self.scope)
        if self.functions and not any(qualname == f or qualname.startswith(f + ".") for f in self.functions):
            return False
        self.sites.append((getattr(node, "lineno", 0), f"{qualname or '<module>'}: {what}"))
        return len(self.sites) - 1 == self.target

    # scopes; annotations and docstrings are not visited
    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> ast.AST:
        self.scope.append(node.name)
        body = node.body[1:] if ast.get_docstring(node, clean=False) is not None else node.body
        for child in body:
            self.visit(child)
        if not isinstance(node, ast.ClassDef):
            node.args.defaults = [self.visit(d) for d in node.args.defaults]
            node.args.kw_defaults = [d if d is None else self.visit(d) for d in node.args.kw_defaults]
        self.scope.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            flipped = _FLIP[type(op)]
            if self._site(node, f"{type(op).__name__} -> {flipped.__name__}"):
                node.ops[i] = flipped()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"{type(node.op).__name__} -> {other.__name__}"):
            node.op = other()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._site(node, "not dropped"):
            return node.operand
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool):
            if self._site(node, f"{node.value} -> {not node.value}"):
                return ast.copy_location(ast.Constant(not node.value), node)
        elif isinstance(node.value, int) and self._site(node, f"{node.value} -> {node.value + 1}"):
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node

    def _arith(self, node: ast.BinOp | ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        swap = {ast.Add: ast.Sub, ast.Sub: ast.Add}.get(type(node.op))
        if swap is not None and self._site(node, f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    visit_BinOp = visit_AugAssign = _arith

    def visit_Slice(self, node: ast.Slice) -> ast.AST:
        self.generic_visit(node)
        if node.step is None and (node.lower is None) != (node.upper is None):
            bound = node.lower or node.upper
            assert bound is not None
            if isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub):
                bound = bound.operand
            if self._site(node, "[a:] -> [:a]" if node.lower is not None else "[:a] -> [a:]"):
                return ast.copy_location(
                    ast.Slice(lower=None if node.lower is not None else bound, upper=bound if node.lower is not None else None),
                    node,
                )
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if (
            len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and name not in _LOG_CALLS
            and self._site(node, f"{name}(...) without its last positional argument")
        ):
            node.args = node.args[:-1]
        return node

    def visit_Break(self, node: ast.Break) -> ast.AST:
        return ast.copy_location(ast.Continue(), node) if self._site(node, "break -> continue") else node

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return ast.copy_location(ast.Break(), node) if self._site(node, "continue -> break") else node


def mutants(source: str, functions: frozenset[str]) -> list[tuple[int, str]]:
    walker = Mutator(functions=functions)
    walker.visit(ast.parse(source))
    return walker.sites


def mutated(tree: ast.Module, index: int, functions: frozenset[str]) -> str:
    new = Mutator(index, functions).visit(copy.deepcopy(tree))
    return ast.unparse(ast.fix_missing_locations(new))


def copy_tree(into: Path) -> None:
    """What the tests import and read: the packages, the tests, the evals they load, the settings."""
    skip = shutil.ignore_patterns("__pycache__", ".car-stores")
    for part in ("car_rag", "car_rag_evals", "tests", "evals"):
        shutil.copytree(ROOT / part, into / part, ignore=skip)
    shutil.copy2(ROOT / "pyproject.toml", into / "pyproject.toml")


def run_tests(tree: Path, tests: tuple[str, ...], limit_s: float) -> tuple[str, str]:
    """(outcome, detail): killed (a test failed, or the mutant would not import), survived, or timeout."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "ANONYMIZED_TELEMETRY": "False",
        "CAR_PROPERTY_EXAMPLES": os.environ.get("CAR_PROPERTY_EXAMPLES", "100"),
    }
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o", "timeout=120", "-rf", *tests]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return "timeout", f"the tests ran past {limit_s:.0f} s"
    if done.returncode == 0:
        return "survived", ""
    failed = re.search(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    return "killed", failed.group(1) if failed else done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "error"


def check_module(module: str, target: Target, tree: Path, log, earlier: dict | None = None) -> dict:
    """Every mutant of ``module``; with ``earlier`` (this module's previous report), only those that
    survived it, the others keeping their earlier outcome (tests added since can only kill more)."""
    path = tree / module
    source = (ROOT / module).read_text(encoding="utf-8")
    ast_tree = ast.parse(source)
    sites = mutants(source, target.functions)
    cache = path.parent / "__pycache__"
    started = time.monotonic()
    path.write_text(ast.unparse(ast_tree), encoding="utf-8")
    outcome, detail = run_tests(tree, target.tests, 3600)
    baseline_s = time.monotonic() - started
    if outcome != "survived":
        raise SystemExit(f"{module}: the unmutated module's tests do not pass ({outcome}: {detail})")
    log(f"{module}: {len(sites)} mutants; its tests pass unmutated in {baseline_s:.0f} s")
    before = {r["id"]: r for r in earlier["results"]} if earlier else {}
    if before and [(r["line"], r["mutation"]) for r in before.values()] != [(line, what) for line, what in sites]:
        raise SystemExit(f"{module}: its mutants are not those of the earlier report (the module changed): run them all")
    results = []
    try:
        for index, (line, what) in enumerate(sites):
            if before and before[index]["outcome"] == "killed":  # a timeout may be the machine's load: run again
                results.append(before[index])
                continue
            shutil.rmtree(cache, ignore_errors=True)
            path.write_text(mutated(ast_tree, index, target.functions), encoding="utf-8")
            outcome, detail = run_tests(tree, target.tests, max(120.0, 5 * baseline_s))
            results.append({"id": index, "line": line, "mutation": what, "outcome": outcome, "detail": detail})
            log(f"  {index:4d} line {line:4d} {outcome:8s} {what}" + (f"  [{detail}]" if outcome != "survived" else ""))
    finally:
        shutil.copy2(ROOT / module, path)
    survived = [r for r in results if r["outcome"] == "survived"]
    timeouts = [r for r in results if r["outcome"] == "timeout"]
    return {
        "module": module,
        "tests": list(target.tests),
        "functions": sorted(target.functions),
        "mutants": len(results),
        "killed": len(results) - len(survived) - len(timeouts),
        "timeout": len(timeouts),
        "survived": len(survived),
        "survival_rate": round(len(survived) / len(results), 4) if results else 0.0,
        "baseline_s": round(baseline_s, 1),
        "rerun_survivors_of_an_earlier_run": bool(before),
        "results": results,
    }


def write_summary(out: Path) -> Path:
    """summary.md: per module, mutants, killed and survived, from the JSON files in ``out``."""
    rows, total, survived = [], 0, 0
    for path in sorted(out.glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        total += report["mutants"]
        survived += report["survived"]
        scope = f" ({', '.join(report['functions'])})" if report["functions"] else ""
        rows.append(
            f"| `{report['module']}`{scope} | {report['mutants']} | {report['killed']} | {report.get('timeout', 0)} "
            f"| {report['survived']} | {100 * report['survival_rate']:.1f}% | {len(report['tests'])} files |"
        )
    lines = [
        "# Mutation check (evals/mutation/mutate.py)",
        "",
        "| module | mutants | killed | timed out | survived | survival | killing tests |",
        "|---|---:|---:|---:|---:|---:|---|",
        *rows,
        f"| all | {total} | | | {survived} | {100 * survived / max(total, 1):.1f}% | |",
        "",
    ]
    summary = out / "summary.md"
    summary.write_text("\n".join(lines), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=list(TARGETS), help="target modules (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--summary", action="store_true", help="only rewrite summary.md from the results in --out")
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="run only the mutants that survived the module's report in --out (after adding tests)",
    )
    args = parser.parse_args(argv)
    if args.summary:
        print(write_summary(args.out).read_text(encoding="utf-8"))
        return 0
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        parser.error(f"not a target: {unknown}; choose from {list(TARGETS)}")
    if args.list:
        for module in args.modules:
            for index, (line, what) in enumerate(mutants((ROOT / module).read_text(encoding="utf-8"), TARGETS[module].functions)):
                print(f"{module}:{line}: #{index} {what}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="car-rag-mutation-") as scratch:
        tree = Path(scratch) / "tree"
        copy_tree(tree)
        (Path(scratch) / "shared").symlink_to(ROOT.parent / "shared")  # the corpora, where the tests look for them
        for module in args.modules:
            name = module.removeprefix("car_rag/").removesuffix(".py").replace("/", ".")
            with (args.out / f"{name}.log").open("a" if args.survivors else "w", encoding="utf-8") as log_file:

                def log(line: str) -> None:
                    print(line, flush=True)
                    log_file.write(line + "\n")
                    log_file.flush()

                earlier = json.loads((args.out / f"{name}.json").read_text(encoding="utf-8")) if args.survivors else None
                report = check_module(module, TARGETS[module], tree, log, earlier)
            (args.out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
            print(f"{module}: {report['survived']} of {report['mutants']} survived", flush=True)
            write_summary(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
