from django.apps import AppConfig


class NotifyConfig(AppConfig):
    """Notifications (通知): webhook and e-mail subscriptions per project and per user, delivered at least
    once through an outbox (``Delivery`` rows written with the event, sent after commit, retried)."""

    name = "apps.notify"
    label = "notify"
    verbose_name = "Notifications"
