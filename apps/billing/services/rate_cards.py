"""Rate cards and project discounts (written with audit), and ``RateBook``: every card and discount
loaded once, answering what a slice costs per CU-hour."""

from __future__ import annotations

from collections import defaultdict
from datetime import date
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from apps.accounts.models import Project
from apps.billing.models import (
    RateCard,
    RateCardDiscount,
    UsageEntry,
)
from apps.billing.services.months import default_currency
from apps.core.audit import change_record_create, snapshot
from apps.core.errors import Conflict, NotFound, ValidationFailed
from apps.core.formatting import format_datetime
from apps.core.validation import validate

RATE_CARD_FIELDS = [
    "name",
    "scope",
    "pool",
    "device_model",
    "template",
    "price_per_cu_hour",
    "currency",
    "effective_from",
    "effective_to",
    "notes",
]


def _overlapping(card: RateCard):
    others = RateCard.objects.filter(
        scope=card.scope,
        pool_id=card.pool_id,
        device_model_id=card.device_model_id,
        template_id=card.template_id,
    ).exclude(pk=card.pk)
    others = others.filter(Q(effective_to__isnull=True) | Q(effective_to__gte=card.effective_from))
    if card.effective_to is not None:
        others = others.filter(effective_from__lte=card.effective_to)
    return others


def rate_card_overlaps(card: RateCard) -> RateCard | None:
    """The first card of the same scope whose dates overlap ``card``'s, or None."""
    return _overlapping(card).order_by("effective_from").first()


def _rate_card_check(card: RateCard) -> None:
    validate(card, what="rate card")
    clash = rate_card_overlaps(card)
    if clash is not None:
        until = format_datetime(clash.effective_to) if clash.effective_to else _("open-ended")
        raise Conflict(
            _(
                "Rate card %(card)r overlaps %(other)r (same scope, %(start)s – %(until)s); "
                "end the other card first or pick other dates."
            )
            % {
                "card": card.name,
                "other": clash.name,
                "start": format_datetime(clash.effective_from),
                "until": until,
            },
            details={"effective_from": [f"overlaps rate card {clash.pk}"]},
            code="rate_card_overlap",
        )


def _lock_rate_cards() -> None:
    # Overlap checks race; serialize rate-card writes (the table is tiny). No key update: metering's
    # key-share lock on every card (``hold_rate_cards``) does not wait for these writers, nor they for it.
    list(RateCard.objects.select_for_update(no_key=True).order_by("pk").values_list("pk", flat=True))


def hold_rate_cards() -> None:
    """In the metering transaction, before any price is read: a key-share lock on every rate card, so
    none is deleted before the entries that name it are committed (the ledger keeps no database foreign
    key to it, billing 0009). ``rate_card_delete`` locks its card for update, which waits for this lock;
    a card deleted first is gone from the prices read after it. A no-op where rows are not locked
    (SQLite serializes writers)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {RateCard._meta.db_table} FOR KEY SHARE")  # noqa: S608


@transaction.atomic
def rate_card_create(*, actor, **fields) -> RateCard:
    unknown = set(fields) - set(RATE_CARD_FIELDS)
    if unknown:
        raise ValidationFailed(
            _("Unknown rate card field(s): %(fields)s") % {"fields": ", ".join(sorted(unknown))}
        )
    fields.setdefault("currency", default_currency())
    _lock_rate_cards()
    card = RateCard(**fields)
    _rate_card_check(card)
    card.save()
    change_record_create(
        actor=actor, action="billing.rate_card_create", obj=card, after=snapshot(card, RATE_CARD_FIELDS)
    )
    return card


@transaction.atomic
def rate_card_update(*, card: RateCard, actor, **fields) -> RateCard:
    unknown = set(fields) - set(RATE_CARD_FIELDS)
    if unknown:
        raise ValidationFailed(
            _("Unknown rate card field(s): %(fields)s") % {"fields": ", ".join(sorted(unknown))}
        )
    _lock_rate_cards()
    card = RateCard.objects.get(pk=card.pk)
    before = snapshot(card, RATE_CARD_FIELDS)
    for name, value in fields.items():
        setattr(card, name, value)
    _rate_card_check(card)
    card.save()
    change_record_create(
        actor=actor,
        action="billing.rate_card_update",
        obj=card,
        before=before,
        after=snapshot(card, RATE_CARD_FIELDS),
    )
    return card


@transaction.atomic
def rate_card_delete(*, card: RateCard, actor) -> None:
    # Locked first: a metering run writing entries that name the card holds a key-share lock on it
    # (``hold_rate_cards``), so this waits for it to commit and then sees its entries.
    if not RateCard.objects.select_for_update().filter(pk=card.pk).exists():
        raise NotFound(_("Rate card %(card)r no longer exists.") % {"card": card.name})
    if UsageEntry.objects.filter(rate_card=card).exists():
        raise Conflict(
            _(
                "Rate card %(card)r has priced usage already; end it (set 'effective to') instead of deleting it."
            )
            % {"card": card.name},
            code="rate_card_in_use",
        )
    change_record_create(
        actor=actor, action="billing.rate_card_delete", obj=card, before=snapshot(card, RATE_CARD_FIELDS)
    )
    card.delete()


@transaction.atomic
def rate_card_discount_set(*, card: RateCard, project: Project, percent: Decimal, actor) -> RateCardDiscount:
    discount = RateCardDiscount.objects.filter(rate_card=card, project=project).first() or RateCardDiscount(
        rate_card=card, project=project
    )
    before = None if discount.pk is None else {"percent": str(discount.percent)}
    discount.percent = percent
    validate(discount, what="discount")
    if not (Decimal(0) <= Decimal(percent) <= Decimal(100)):
        raise ValidationFailed(_("A discount is between 0 and 100 %."), details={"percent": ["0–100"]})
    discount.save()
    change_record_create(
        actor=actor,
        action="billing.discount_set",
        obj=discount,
        before=before,
        after={"percent": str(discount.percent), "project": project.pk, "rate_card": card.pk},
    )
    return discount


class RateBook:
    """Every rate card and discount, loaded once; answers "what does this slice cost per CU-hour"."""

    ORDER = (
        RateCard.Scope.TEMPLATE,
        RateCard.Scope.DEVICE_MODEL,
        RateCard.Scope.POOL,
        RateCard.Scope.DEFAULT,
    )

    def __init__(self) -> None:
        self.cards: dict[tuple[str, int | None], list[RateCard]] = defaultdict(list)
        for card in RateCard.objects.order_by("-effective_from"):
            key = {
                RateCard.Scope.TEMPLATE: card.template_id,
                RateCard.Scope.DEVICE_MODEL: card.device_model_id,
                RateCard.Scope.POOL: card.pool_id,
            }.get(card.scope)
            self.cards[(card.scope, key)].append(card)
        self.discounts = {(d.rate_card_id, d.project_id): d.percent for d in RateCardDiscount.objects.all()}
        self._memo: dict[tuple, tuple[RateCard | None, Decimal, Decimal]] = {}

    def _card(self, scope: str, key: int | None, day: date) -> RateCard | None:
        for card in self.cards.get((scope, key), ()):
            if card.effective_from <= day and (card.effective_to is None or day <= card.effective_to):
                return card
        return None

    def price(
        self,
        *,
        day: date,
        template_id: int | None,
        device_model_id: int | None,
        pool_id: int | None,
        project_id: int,
    ) -> tuple[RateCard | None, Decimal, Decimal]:
        """(card, price per CU-hour, discount %) in force on the day; no card → price 0."""
        memo_key = (day, template_id, device_model_id, pool_id, project_id)
        hit = self._memo.get(memo_key)
        if hit is not None:
            return hit
        card = None
        scopes: tuple[tuple[str, int | None], ...] = (
            (str(RateCard.Scope.TEMPLATE), template_id),
            (str(RateCard.Scope.DEVICE_MODEL), device_model_id),
            (str(RateCard.Scope.POOL), pool_id),
            (str(RateCard.Scope.DEFAULT), None),
        )
        for scope, key in scopes:
            if scope != RateCard.Scope.DEFAULT and key is None:
                continue
            card = self._card(scope, key, day)
            if card is not None:
                break
        result: tuple[RateCard | None, Decimal, Decimal]
        if card is None:
            result = (None, Decimal(0), Decimal(0))
        else:
            result = (card, card.price_per_cu_hour, self.discounts.get((card.pk, project_id), Decimal(0)))
        self._memo[memo_key] = result
        return result
