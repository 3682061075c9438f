"""``car-rag policies``: the built-in policies and their rules (imports no model and no vector store)."""

from __future__ import annotations

import argparse

from car_rag.cli.command import Command

__all__ = ["POLICIES"]


def _run(args: argparse.Namespace) -> int:
    from car_rag.policy import builtin_policies, load_policy

    for name in builtin_policies():
        policy = load_policy(name)
        print(f"{name}: {' '.join(policy.description.split())}")
        for rule in policy.rules:
            within = ", ".join(rule.within) or "global"
            order = "" if rule.order == "any" else f", {rule.order}"
            print(f"    {rule.name}: {rule.label()} within [{within}]{order}")
    return 0


POLICIES = Command("policies", "list the built-in policies and their rules", ("car-rag policies",), run=_run)
