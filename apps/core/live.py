"""Server-rendered live sections (issue 29 §2): a page's sections follow the server without a reload.

A page marks each section that may change with ``data-live-section="<name>"`` and the version it was
rendered at (``data-live-version``). The page's live endpoint (the JSON ``static/js/live.js`` polls)
answers, next to its ``fields``, the sections the page asked for (``?sections=a,b``)::

    {"sections": {"job-7-why": {"version": "3f2a…", "html": "<section …>…</section>"}}}

``live.js`` replaces a section's content only when its version changed. The HTML comes from the same
template partial the page includes, rendered with Django's autoescape — the endpoint never builds
markup from strings — so a section reads exactly as after a reload. A section the reader may not see
(another project's job) is simply absent from the answer: it confirms nothing.

The version is a hash of the rendered HTML without the CSRF token's value (Django masks the token
anew on every render, so a form in a section would otherwise look changed on every poll).
"""

from __future__ import annotations

import hashlib
import re

from django.http import HttpRequest, JsonResponse
from django.template.context import make_context
from django.template.loader import get_template, render_to_string
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _

# At most this many sections per poll (a page of the job list has 50 rows).
MAX_SECTIONS = 200
# Section names: letters, digits and dashes ("job-12-why", "fleet-models").
NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
_CSRF_VALUE = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*(")')


class SectionsInvalid(ValueError):
    """``?sections=`` is not a comma-separated list of section names."""


def section_version(html: str) -> str:
    """A short hash of a section's HTML (CSRF token values left out)."""
    stable = _CSRF_VALUE.sub(r"\1\2", html)
    return hashlib.sha256(stable.encode("utf-8")).hexdigest()[:16]


def render_section(request: HttpRequest, template: str, context: dict) -> dict:
    """``{"version", "html"}`` of one section: ``template`` rendered with ``context`` for ``request``."""
    html = render_to_string(template, context, request=request)
    return {"version": section_version(html), "html": html}


def render_sections(request: HttpRequest, template: str, contexts: list[dict]) -> list[dict]:
    """``render_section`` for many contexts of one template (a list's rows) in one pass: the template
    looked up and the request's context processors run once, each row rendered in its own pushed
    scope with its own render state (``{% cycle %}``, blocks), as ``render_to_string`` renders it."""
    found = get_template(template)
    compiled = found.template
    context = make_context({}, request, autoescape=compiled.engine.autoescape)
    out = []
    with context.bind_template(compiled):
        context.template_name = compiled.name
        for extra in contexts:
            with context.push(extra):
                html = compiled.render(context)
            out.append({"version": section_version(html), "html": html})
    return out


def page_section(section: dict) -> dict:
    """The same section for the page's first render: its HTML marked safe (it comes from a template
    with autoescape), to be placed in the wrapper that carries its name and version."""
    return {"version": section["version"], "html": mark_safe(section["html"])}  # noqa: S308


def requested_sections(request: HttpRequest) -> list[str]:
    """The names in ``?sections=`` (deduplicated, in order); SectionsInvalid when one is malformed."""
    names: list[str] = []
    for part in (request.GET.get("sections") or "").split(","):
        part = part.strip()
        if not part:
            continue
        if not NAME.match(part):
            raise SectionsInvalid(part)
        if part not in names:
            names.append(part)
    if len(names) > MAX_SECTIONS:
        raise SectionsInvalid(f"more than {MAX_SECTIONS}")
    return names


def sections_invalid_response() -> JsonResponse:
    """The 400 for a malformed ``?sections=``, in the reader's language."""
    return JsonResponse(
        {
            "error": "invalid",
            "message": _("sections must be section names separated by commas (at most %(max)d).")
            % {"max": MAX_SECTIONS},
        },
        status=400,
    )
