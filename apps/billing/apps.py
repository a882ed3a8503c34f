from django.apps import AppConfig


def job_cost_per_hour(job, compute_units):
    """What an hour of the request costs at the rate card in force today, after the project's
    discount (e.g. "12.50 CNY"); None without a price. Registered in
    ``apps.scheduling.extensions.JOB_COST_PER_HOUR`` (the submit page sits below us)."""
    from decimal import Decimal

    from django.conf import settings
    from django.utils import timezone

    from apps.billing.services import RateBook

    model_id = job.device_model_id or (job.template.device_model_id if job.template_id else None)
    card, price, discount = RateBook().price(
        day=timezone.localdate(),
        template_id=job.template_id,
        device_model_id=model_id,
        pool_id=None,
        project_id=job.project_id,
    )
    if card is None:
        return None
    amount = (Decimal(compute_units) * price * (100 - discount) / 100).quantize(Decimal("0.01"))
    return f"{amount} {card.currency or settings.SUANCHI.get('BILLING_CURRENCY', 'CNY')}"


def price_per_cu_hour(*, template_id, device_model_id, project_id=None):
    """(price per CU-hour after the project's discount, currency) in force today, or None without a rate
    card. Registered in ``apps.benchlib.recommend.PRICE_PER_CU_HOUR`` (the library sits below us)."""
    from decimal import Decimal

    from django.conf import settings
    from django.utils import timezone

    from apps.billing.services import RateBook

    card, price, discount = RateBook().price(
        day=timezone.localdate(),
        template_id=template_id,
        device_model_id=device_model_id,
        pool_id=None,
        project_id=project_id or 0,
    )
    if card is None:
        return None
    net = (Decimal(price) * (100 - Decimal(discount)) / 100).quantize(Decimal("0.0001"))
    return net, card.currency or settings.SUANCHI.get("BILLING_CURRENCY", "CNY")


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"
    verbose_name = "Billing"

    def ready(self) -> None:
        from apps.scheduling.extensions import JOB_COST_PER_HOUR

        JOB_COST_PER_HOUR.register(job_cost_per_hour)

        from apps.benchlib.recommend import PRICE_PER_CU_HOUR

        PRICE_PER_CU_HOUR.register(price_per_cu_hour)
