"""The report page: one static HTML file, its CSS and script inline, its data one JSON block.

Untrusted text (record texts, questions, model answers) reaches the page only inside the
``application/json`` block, where every ``<``, ``>`` and ``&`` is written as a ``\\u`` escape so
no ``</script>`` can close it; the script builds the DOM with ``textContent`` only.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["embed_json", "render_page"]

_ESCAPES = (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script type="application/json">`` element (the characters can
    only occur inside JSON strings, where the escapes mean the same)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in _ESCAPES:
        text = text.replace(char, escaped)
    return text


def _asset(name: str) -> str:
    return (resources.files("car_rag_evals.report") / "assets" / name).read_text(encoding="utf-8")


def render_page(data: dict[str, Any], title: str) -> str:
    """The whole page; ``title`` is escaped here, everything else is rendered by the script."""
    from html import escape

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        f"<style>{_asset('report.css')}</style></head><body>"
        "<noscript>This report draws its tables with JavaScript.</noscript>"
        f'<script id="report-data" type="application/json">{embed_json(data)}</script>'
        f"<script>{_asset('report.js')}</script></body></html>\n"
    )
