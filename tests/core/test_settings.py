from django.conf import settings
from django.db import connection


def test_tests_run_on_postgresql():
    assert connection.vendor == "postgresql"


def test_cache_is_redis():
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")
