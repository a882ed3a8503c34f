"""Template helpers for ledger events (issue 29 §5): readable changes and grouped runs."""

from __future__ import annotations

from django import template

from apps.inventory import event_changes as changes

register = template.Library()


@register.simple_tag(takes_context=True)
def event_changes(context, event) -> list[dict]:
    """``{% event_changes event as lines %}``: the event's before / after as "field: old → new" lines."""
    request = context.get("request")
    user = getattr(request, "user", None)
    # One name cache per render: a list of events looks each project / pool up once.
    cache = context.render_context.setdefault("ledger_event_names", {})
    names = cache.get(id(user))
    if names is None:
        names = cache[id(user)] = changes._Names(user)
    return changes.event_changes(event, user=user, names=names)


@register.simple_tag
def event_runs(events) -> list[dict]:
    """``{% event_runs events as runs %}``: consecutive events on one node of one kind as one group."""
    return changes.event_runs(events)
