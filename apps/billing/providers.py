"""What billing answers for the layers below it and the pages.

* ``job_cost_per_hour`` — the submit page's cost of an hour of a request (``apps.jobs.views.submit``
  calls it directly);
* ``price_per_cu_hour`` — the library's price per CU-hour for its money ranking, through the slot
  ``apps.benchlib.recommend.PRICE_PER_CU_HOUR`` (registered in ``BillingConfig``).

Both price with the rate card in force today after the project's discount, by the ledger's one rounding
rule (``apps.billing.pricing``): an hour previewed here costs the cent its bill line and its job cost show.
"""

from __future__ import annotations

from decimal import Decimal

from django.utils import timezone

from apps.billing.pricing import cu_hours_of, discounted_amount, to_cents
from apps.billing.services import RateBook
from apps.core.conf import suanchi_setting


def _currency(card) -> str:
    return card.currency or suanchi_setting("BILLING_CURRENCY", "CNY")


def job_cost_per_hour(job, compute_units) -> str | None:
    """What an hour of the request costs at the rate card in force today, after the project's
    discount (e.g. "12.50 CNY"); None without a price."""
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
    amount = discounted_amount(cu_hours=cu_hours_of(compute_units, 1), price=price, discount_percent=discount)
    return f"{to_cents(amount)} {_currency(card)}"


def price_per_cu_hour(*, template_id, device_model_id, project_id=None) -> tuple[Decimal, str] | None:
    """(price of one CU-hour after the project's discount, at the ledger's 6 places; currency) in force
    today, or None without a rate card."""
    card, price, discount = RateBook().price(
        day=timezone.localdate(),
        template_id=template_id,
        device_model_id=device_model_id,
        pool_id=None,
        project_id=project_id or 0,
    )
    if card is None:
        return None
    return discounted_amount(cu_hours=1, price=price, discount_percent=discount), _currency(card)
