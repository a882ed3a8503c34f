"""The API's stored texts in the reader's language, like the pages (issue 29 §1).

A row keeps the English sentence a service or worker wrote (apps.core.stored_text); a page shows it
with ``|localized``. An API answer does the same for the request's language (``LocaleMiddleware``
activates it from ``Accept-Language`` or the language cookie; English when neither asks otherwise):
a serializer lists its stored-text fields in ``localized_fields``::

    class JobSerializer(LocalizedTextsMixin, serializers.ModelSerializer):
        localized_fields = ("state_reason",)

A field holding JSON (a trace's steps, a gate's results, a soak's missing evidence) is localized
inside: each string of a list, and in a mapping the values under ``TEXT_KEYS`` only — identifiers
beside them (``tier``, ``status``, ``node``) stay as they are for programs that read them. An English
reader gets the stored text unchanged.
"""

from __future__ import annotations

from django.utils.translation import get_language

from apps.core.stored_text import localize

# Keys of a stored JSON object whose values are sentences people read.
TEXT_KEYS = frozenset({"message", "detail", "source", "unit", "description", "reason", "text", "explanation"})


def localize_deep(value):
    if isinstance(value, str):
        return localize(value)
    if isinstance(value, list):
        return [localize_deep(v) for v in value]
    if isinstance(value, dict):
        return {k: localize_deep(v) if k in TEXT_KEYS else v for k, v in value.items()}
    return value


class LocalizedTextsMixin:
    localized_fields: tuple[str, ...] = ()

    def to_representation(self, instance):
        data = super().to_representation(instance)  # type: ignore[misc]  # mixed into a DRF serializer
        if (get_language() or "en").startswith("en"):
            return data  # the stored English as it is, byte for byte, for the programs that read it
        for name in self.localized_fields:
            if name in data:
                data[name] = localize_deep(data[name])
        return data
