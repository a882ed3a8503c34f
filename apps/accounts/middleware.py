"""Apply a signed-in user's own time zone and language (apps.accounts.models.UserPreference).

Runs after AuthenticationMiddleware. The time zone is activated for the request (templates, forms,
exports and charts that use the current time zone follow it); the language applies when the browser
did not choose one explicitly with the language switcher (Django's language cookie wins).
"""

from __future__ import annotations

import zoneinfo

from django.conf import settings
from django.utils import timezone, translation


class UserPreferenceMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        activated = False
        if user is not None and user.is_authenticated:
            from apps.accounts.models import UserPreference

            pref = UserPreference.objects.filter(user=user).only("language", "time_zone").first()
            if pref is not None:
                if pref.time_zone:
                    try:
                        timezone.activate(zoneinfo.ZoneInfo(pref.time_zone))
                        activated = True
                    except zoneinfo.ZoneInfoNotFoundError:
                        pass
                if pref.language and settings.LANGUAGE_COOKIE_NAME not in request.COOKIES:
                    translation.activate(pref.language)
                    request.LANGUAGE_CODE = translation.get_language()
        try:
            return self.get_response(request)
        finally:
            if activated:
                timezone.deactivate()
