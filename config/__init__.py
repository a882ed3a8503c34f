"""Suanchi Django project package (settings, urls, wsgi/asgi)."""

from worker.celery import app as celery_app

__all__ = ("celery_app",)
