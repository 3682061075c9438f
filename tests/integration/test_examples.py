"""The LangChain LCEL example run as a newcomer runs it from a fresh clone: offline (no chat
server, so it ends in its stand-in chat model), in a fresh interpreter with a time limit. Its
output must name the records that are current and the ones they replaced, and the stand-in must
list the documents car-rag's default evidence gave it (it used to look for XML packets in plain
documents and print "current: ; replaced: none")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 300


def test_the_lcel_example_offline_names_the_current_and_replaced_records(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env |= {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langchain_lcel_chain.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=TIME_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "using OfflineFakeChatModel" in out
    summaries = re.findall(r"^  current: (.*); replaced: (.*)$", out, re.M)
    assert len(summaries) == 2, out  # one per demo question
    (current, replaced), (legal_current, legal_replaced) = summaries
    assert "sec-lodash-4.17.12-release" in current.split(", ")
    assert "sec-lodash-cve-2099-10001-disclosure (by sec-lodash-4.17.12-release)" in replaced
    assert "law-scotus-2018-concrete-harm-overruling" in legal_current.split(", ")
    assert "law-dalton-v-northgate-standing-ruling (by law-scotus-2018-concrete-harm-overruling)" in legal_replaced
    stand_in = r"^A: \(offline fake chat model, not an answer\) it read (\d+) documents, in car-rag's order: (.*)$"
    answers = re.findall(stand_in, out, re.M)
    assert [n for n, _ in answers] == ["5", "5"], out
    assert answers[0][1].startswith("[Document 1] patch_release; [Document 2] ")
    assert "current: ;" not in out and "replaced: none" not in out
