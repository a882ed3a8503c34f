"""Reads for the device catalog: coefficients by date and matching tool-reported names to models.

Catalog data is public spec data: it is not scoped by project (the API still requires a user).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from apps.catalog.models import ComputeCoefficient, DeviceModel

# ------------------------------------------------------------------ coefficients


def _today() -> date:
    return timezone.localdate()


def coefficient_on(device_model: DeviceModel, on: date | None = None) -> Decimal | None:
    """The coefficient in force on a day: the newest row with effective_from <= on, or None."""
    return (
        ComputeCoefficient.objects.filter(device_model=device_model, effective_from__lte=on or _today())
        .order_by("-effective_from")
        .values_list("value", flat=True)
        .first()
    )


def coefficients_on(model_ids: Iterable[int], on: date | None = None) -> dict[int, Decimal]:
    """{device_model_id: coefficient in force on the day} in one query; models without one are absent."""
    ids = set(model_ids)
    if not ids:
        return {}
    rows = (
        ComputeCoefficient.objects.filter(device_model_id__in=ids, effective_from__lte=on or _today())
        .order_by("device_model_id", "-effective_from")
        .values_list("device_model_id", "value")
    )
    result: dict[int, Decimal] = {}
    for model_id, value in rows:
        result.setdefault(model_id, value)
    return result


def coefficient_subquery(on: date | None = None) -> Subquery:
    """For .annotate(): the coefficient in force on the day for the outer DeviceModel row."""
    newest = (
        ComputeCoefficient.objects.filter(device_model=OuterRef("pk"), effective_from__lte=on or _today())
        .order_by("-effective_from")
        .values("value")[:1]
    )
    return Subquery(newest, output_field=ComputeCoefficient._meta.get_field("value"))


def device_model_list(*, on: date | None = None) -> QuerySet[DeviceModel]:
    """All device models, each annotated with ``current_coefficient`` (one query, no N+1)."""
    return DeviceModel.objects.annotate(current_coefficient=coefficient_subquery(on))


def compute_coefficient_list() -> QuerySet[ComputeCoefficient]:
    return ComputeCoefficient.objects.select_related("device_model", "created_by")


# ------------------------------------------------------------------ matching tool names to models

# Words that vendor tools put in front of the model and that never tell two models apart.
_NOISE_WORDS = frozenset({"nvidia", "tesla", "amd", "huawei", "hygon", "cambricon", "intel", "habana"})
# Words a catalog name may carry that a tool may leave out ("910B3" is "Ascend 910B3").
_FAMILY_WORDS = frozenset({"ascend", "dcu", "instinct"})
_SPLIT = re.compile(r"[\s\-_/(),]+")
_MEMORY_TOKEN = re.compile(r"^(\d+)gb?$")
_BOARD_REVISION = re.compile(r"^v\d$")  # "910A-Ascend-V1": a board revision, not a model word
# Reported memory vs the catalog's nominal GB: tools show a little less (T4 15360 of 16384 MiB).
_MEMORY_RATIO = (0.85, 1.05)
# PCI vendor ids, to strip them from "DDDDVVVV" ids as nvidia-smi prints them ("20B210DE").
_PCI_VENDOR_IDS = frozenset({"10de", "1002", "19e5", "1d94", "cabc", "1da3", "8086"})


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class _Alias:
    model: DeviceModel
    tokens: frozenset[str]
    memory_gb: int | None


def _tokens(text: str) -> tuple[frozenset[str], set[int]]:
    """Model words and memory sizes (GB) of a name: "NVIDIA A100-SXM4-80GB" -> {a100, sxm4}, {80}."""
    words: set[str] = set()
    memory: set[int] = set()
    for token in _SPLIT.split(text.casefold()):
        if not token or token in _NOISE_WORDS or _BOARD_REVISION.match(token):
            continue
        size = _MEMORY_TOKEN.match(token)
        if size:
            memory.add(int(size.group(1)))
        else:
            words.add(token)
    return frozenset(words), memory


def _name_variants(name: str) -> list[str]:
    """ "DCU Z100/Z100L" -> ["DCU Z100", "DCU Z100L"]: a slash inside a word lists alternatives."""
    variants = [""]
    for word in name.split():
        options = word.split("/") if "/" in word else [word]
        variants = [f"{head} {option}".strip() for head in variants for option in options if option]
    return variants


def _aliases(model: DeviceModel) -> list[_Alias]:
    catalog_gb = round(model.memory_mib / 1024) if model.memory_mib else None
    aliases = []
    for text in [*_name_variants(model.name), *model.product_names]:
        words, memory = _tokens(text)
        if not words:
            continue
        aliases.append(_Alias(model, words, next(iter(memory)) if len(memory) == 1 else catalog_gb))
    return aliases


def _normalise_pci_id(value: str) -> str:
    text = value.strip().casefold()
    text = text.removeprefix("0x")
    if len(text) == 8 and text[4:] in _PCI_VENDOR_IDS:
        text = text[:4]
    return text


def _unique(models: Iterable[DeviceModel]) -> DeviceModel | None:
    found = {m.pk: m for m in models}
    return next(iter(found.values())) if len(found) == 1 else None


def _memory_fits(model: DeviceModel, memory_mib: int) -> bool:
    if not model.memory_mib:
        return False
    low, high = _MEMORY_RATIO
    return low <= memory_mib / model.memory_mib <= high


def device_model_match(
    *, vendor: str, raw_name: str | None, pci_device_id: str | None = None, memory_mib: int | None = None
) -> DeviceModel | None:
    """The catalog model a vendor tool's name (and PCI id, memory) denotes, or None.

    In order: exact name (case and whitespace folded) against the model name and its product_names;
    the PCI device id; then a conservative token match: vendor words ("NVIDIA", "Tesla") are dropped,
    memory sizes ("80GB") must agree with the model, every remaining word must be in the model's name
    and the model's name may only add family words ("Ascend", "DCU", "Instinct"). When several models
    still fit, the reported memory picks one (40 vs 80 GB); a tie stays None — never a guess.
    One query: the vendor's models are loaded once.
    """
    models = list(DeviceModel.objects.filter(vendor=(vendor or "").strip().casefold()))
    if not models:
        return None

    if raw_name and raw_name.strip():
        wanted = _normalise(raw_name)
        exact = [
            m
            for m in models
            if wanted == _normalise(m.name) or wanted in {_normalise(p) for p in m.product_names}
        ]
        if exact:
            return _unique(exact)

    if pci_device_id and pci_device_id.strip():
        wanted_id = _normalise_pci_id(pci_device_id)
        by_pci = [m for m in models if wanted_id in {_normalise_pci_id(p) for p in m.pci_device_ids}]
        if by_pci:
            return _unique(by_pci)

    if not raw_name or not raw_name.strip():
        return None
    words, memory = _tokens(raw_name)
    if not words or len(memory) > 1:
        return None
    candidates = {}
    for model in models:
        for alias in _aliases(model):
            if not (words <= alias.tokens and alias.tokens - words <= _FAMILY_WORDS):
                continue
            if memory and alias.memory_gb not in memory:
                continue
            candidates[model.pk] = model
    if len(candidates) == 1:
        return next(iter(candidates.values()))
    if len(candidates) > 1 and memory_mib:
        return _unique(m for m in candidates.values() if _memory_fits(m, memory_mib))
    return None
