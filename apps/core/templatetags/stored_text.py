"""``{{ event.message|localized }}``: a stored text in the reader's language (apps.core.stored_text)."""

from django import template

from apps.core.stored_text import localize

register = template.Library()


@register.filter(name="localized")
def localized(value):
    return localize(value)
