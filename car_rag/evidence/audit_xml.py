"""Deprecated: the audit form is :mod:`car_rag.evidence.audit`, and ``render_xml`` is
:func:`~car_rag.evidence.audit.render_audit`. Importing this module warns; it goes in the next release."""

from car_rag.deprecation import warn_renamed
from car_rag.evidence.audit import format_scope, parse_scope, render_xml
from car_rag.evidence.wording import compact_relation_text

__all__ = ["compact_relation_text", "format_scope", "parse_scope", "render_xml"]

warn_renamed("car_rag.evidence.audit_xml", "car_rag.evidence.audit (render_xml is render_audit)", stacklevel=2)
