"""The admin's "here is your new key" page, for API tokens and node-agent tokens.

The key was handed over in a flash message, which Django keeps in a cookie (or the session) until
the next page reads it: the plain key then sat in the browser's cookie jar and crossed the network
twice more. Now the add view answers with a page of its own that shows the key once, is marked
``Cache-Control: no-store`` (issue 27 §4) and stores it nowhere.
"""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.translation import gettext as _

_ATTRIBUTE = "_suanchi_new_key"


class OneTimeKeyAdminMixin:
    """For a ModelAdmin whose ``save_model`` makes a key: call ``show_key_once(request, key)`` there."""

    def show_key_once(self, request, key: str) -> None:
        setattr(request, _ATTRIBUTE, key)

    def response_add(self, request, obj, post_url_continue=None):
        key = getattr(request, _ATTRIBUTE, None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "object": obj,
            "key": key,
            "title": _("Copy the new key now"),
            "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
        }
        response = TemplateResponse(request, "admin/one_time_key.html", context)
        add_never_cache_headers(response)
        return response
