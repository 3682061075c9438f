"""car-rag's MCP tools through the official MCP SDK's client, as an agent host calls them.

`car-rag mcp --store STORE` serves two tools over stdio: ``retrieve`` (the plain evidence, and
for each document its status and what voids it) and ``explain`` (a record's authority chain up
to the records that control it). This script spawns the command as an MCP host (Claude Desktop,
an agent framework) would, lists the tools and calls each once.

    pip install -e ".[mcp]"
    python examples/mcp_agent_tools.py                       # builds the demo store in a temporary folder
    python examples/mcp_agent_tools.py --store ./store --question "..." --explain DOC_ID

The host's own configuration is the same command, e.g. for Claude Desktop::

    {"mcpServers": {"car-rag": {"command": "car-rag", "args": ["mcp", "--store", "/path/to/store"]}}}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import car_rag

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
QUESTION = "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?"
RECORD = "sec-lodash-cve-2099-10001-disclosure"
PASSED_ON = ("PYTHONPATH", "HF_HUB_OFFLINE", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "ANONYMIZED_TELEMETRY")
"""What the spawned command keeps of this environment (the SDK passes only a few variables on)."""


async def call_tools(store: Path, question: str, record: str) -> None:
    env = {"HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"} | {k: os.environ[k] for k in PASSED_ON if k in os.environ}
    server = StdioServerParameters(command=sys.executable, args=["-m", "car_rag", "mcp", "--store", str(store)], env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        print("tools:", ", ".join(tool.name for tool in (await session.list_tools()).tools))
        retrieved = (await session.call_tool("retrieve", {"query": question, "k": 8})).structured_content
        print(f"\nretrieve({question!r}):")
        for doc in retrieved["records"]:
            by = f"  superseded by {', '.join(doc['superseded_by'])}" if doc["status"] == "superseded" else ""
            print(f"  [Document {doc['document']}] {doc['status']:10} {doc['doc_id']}{by}")
        chain = (await session.call_tool("explain", {"doc_id": record})).structured_content
        print(f"\nexplain({record!r}): {chain['status']}")
        for edge in chain["chain"]:
            print(f"  {edge['superseder']} voids {edge['target']} by {edge['rule']}: {edge['rule_description']}")
        print("  controlled by:", ", ".join(c["doc_id"] for c in chain["controlling"]) or "nothing (it is in force)")
        print("\nthe tool output as the agent reads it begins:", json.dumps(retrieved)[:160], "...")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="a store made by car-rag ingest (default: the demo corpus, built now)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--explain", default=RECORD, help="the doc_id to explain")
    args = parser.parse_args()
    if args.store is not None:
        asyncio.run(call_tools(args.store, args.question, args.explain))
        return
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "store"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "car_rag",
                "ingest",
                str(DEMO / "corpus.jsonl"),
                "--store",
                str(store),
                "--policy",
                str(DEMO / "policy.toml"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        asyncio.run(call_tools(store, args.question, args.explain))


if __name__ == "__main__":
    main()
