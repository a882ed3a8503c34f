"""``{{ text|tls_words }}``: a stored error text that is a TLS failure, explained in the reader's
language with what to check (``apps.clusters.tls``); "" when the text is no TLS failure."""

from __future__ import annotations

from django import template

from apps.clusters.tls import tls_failure, tls_lines

register = template.Library()


@register.filter(name="tls_words")
def tls_words(text) -> str:
    if not text:
        return ""
    found = tls_failure(RuntimeError(str(text)))
    return " ".join(tls_lines(found)) if found else ""
