"""Reads for the device catalog: coefficients by date and matching tool-reported names to models.

Catalog data is public spec data: it is not scoped by project (the API still requires a user).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.catalog.models import ComputeCoefficient, ComputeTemplate, DeviceModel, DeviceRequestTemplate
from apps.catalog.partitions import MIG, PartitionProfile, ProfileError, partition_profile
from apps.catalog.request_spec import json_dump, yaml_dump
from apps.core.stored_text import localize, stored

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


# ------------------------------------------------------------------ compute templates


def _coefficient_field():
    return ComputeCoefficient._meta.get_field("value")


def template_coefficient_subquery(on: date | None = None) -> Subquery:
    """For .annotate() on ComputeTemplate: its device model's coefficient in force on the day."""
    newest = (
        ComputeCoefficient.objects.filter(
            device_model=OuterRef("device_model_id"), effective_from__lte=on or _today()
        )
        .order_by("-effective_from")
        .values("value")[:1]
    )
    return Subquery(newest, output_field=_coefficient_field())


def compute_template_list(*, on: date | None = None) -> QuerySet[ComputeTemplate]:
    """Every compute template with its device model and ``current_coefficient`` (one query)."""
    return ComputeTemplate.objects.select_related("device_model").annotate(
        current_coefficient=template_coefficient_subquery(on)
    )


def device_model_catalog_list(*, on: date | None = None) -> QuerySet[DeviceModel]:
    """Device models with today's coefficient, its basis and date, and their active template count."""
    newest = ComputeCoefficient.objects.filter(
        device_model=OuterRef("pk"), effective_from__lte=on or _today()
    ).order_by("-effective_from")
    templates = (
        ComputeTemplate.objects.filter(device_model=OuterRef("pk"), is_retired=False)
        .order_by()
        .values("device_model")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return DeviceModel.objects.annotate(
        current_coefficient=Subquery(newest.values("value")[:1], output_field=_coefficient_field()),
        current_coefficient_basis=Subquery(newest.values("basis")[:1]),
        current_coefficient_from=Subquery(newest.values("effective_from")[:1]),
        template_count=Coalesce(Subquery(templates, output_field=IntegerField()), Value(0)),
    )


_UNSET: Any = object()


def _decimal_text(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:f}"


def _kubernetes_resources(template: ComputeTemplate, profile: PartitionProfile | None) -> dict[str, int]:
    """The extended resource a device plugin advertises for this slice, where it is certain."""
    if profile is None:
        return {}
    if profile.kind == MIG:
        return {f"nvidia.com/mig-{profile.name}": 1}
    detail = profile.detail
    if detail.get("mem_gb") is not None and detail.get("aicpu") is not None:
        suffix = f"-{detail['aicore']}c.{detail['aicpu']}cpu.{detail['mem_gb']}g"
        for name in template.device_model.k8s_resource_names:
            if name.endswith(suffix):
                return {name: 1}
    return {}


# ``PartitionProfile.basis()`` (catalog/partitions.py, free of Django) says in English where a
# partition template's numbers come from; these ids show it in the reader's language (``profile_basis``).
BASIS_MIG = stored(
    "MIG %(profile)s: %(g)s of %(slices)s compute slices (%(share)s %%); memory %(gb)s GiB = the figure in "
    "the profile name x 1024 MiB (nominal, the instance has slightly less usable); NVIDIA allows %(max)s per card"
)
BASIS_VNPU = stored(
    "vNPU %(profile)s: %(aicore)s of %(ai_cores)s AI cores (%(share)s %%), %(aicpu)s AI CPU; memory %(gb)s GiB "
    "from the catalog; at most %(max)s per card by AI cores"
)
BASIS_VNPU_NO_MEMORY = stored(
    "vNPU %(profile)s: %(aicore)s of %(ai_cores)s AI cores (%(share)s %%), %(aicpu)s AI CPU; memory not fixed "
    "by the template; at most %(max)s per card by AI cores"
)
BASIS_AMD = stored(
    "AMD partition %(profile)s: 1 of %(max)s logical GPUs of the card in %(mode)s mode (%(share)s %%); memory "
    "%(gb)s GiB = the card's memory / %(max)s in whole GiB (nominal; the driver publishes KFD's slightly lower "
    "figure); the card must run in this mode"
)
BASIS_AMD_NO_MEMORY = stored(
    "AMD partition %(profile)s: 1 of %(max)s logical GPUs of the card in %(mode)s mode (%(share)s %%); memory "
    "unknown (the catalog lacks the card's memory); the card must run in this mode"
)
BASIS_FEWER_FIT = stored(
    "%(basis)s; only %(fit)s fit the card's memory at this nominal size, so templates allow %(default)s"
)


def profile_basis(profile: PartitionProfile) -> str:
    """``profile.basis()`` in the reader's language."""
    return localize(profile.basis())


def template_describe(template: ComputeTemplate, *, coefficient: Decimal | None = _UNSET) -> dict[str, Any]:
    """The template as a document (exported as YAML or JSON). Decimals are strings.

    The coefficient is today's for the device model: the ``current_coefficient`` annotation when the
    template came from compute_template_list, else one query.
    """
    if coefficient is _UNSET:
        coefficient = getattr(template, "current_coefficient", _UNSET)
        if coefficient is _UNSET:
            coefficient = coefficient_on(template.device_model) if template.device_model_id else None
    card = template.device_model
    profile: PartitionProfile | None = None
    if template.partition_profile:
        try:
            profile = partition_profile(card, template.partition_profile)
        except ProfileError:
            profile = None
    metadata: dict[str, Any] = {"name": template.slug, "displayName": template.name}
    if template.is_builtin:
        metadata["builtin"] = True
    if template.is_retired:
        metadata["retired"] = True
    spec: dict[str, Any] = {
        "deviceModel": {
            "name": card.name,
            "slug": card.slug,
            "vendor": card.vendor,
            "type": card.kind.upper(),
            "memoryMiB": card.memory_mib,
        },
        "memoryGiB": template.memory_gib,
        "memoryMiB": template.memory_mib,
        "computeShare": _decimal_text(template.compute_share),
        "isolation": str(template.isolation),
    }
    if template.partition_profile:
        partition: dict[str, Any] = {
            "type": profile.kind if profile else "unknown",
            "profile": template.partition_profile,
        }
        if profile is not None:
            partition["basis"] = profile_basis(profile)
        spec["partition"] = partition
    spec["maxInstancesPerCard"] = template.max_instances
    resources = _kubernetes_resources(template, profile)
    if resources:
        spec["kubernetesResources"] = resources
    per_instance = template.compute_units(coefficient)
    status = {
        "coefficient": _decimal_text(coefficient),
        "computeUnits": _decimal_text(per_instance),
        "computeUnitsPerCard": _decimal_text(
            None if per_instance is None else per_instance * template.max_instances
        ),
    }
    document: dict[str, Any] = {
        "apiVersion": "suanchi.io/v1",
        "kind": "ComputeTemplate",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }
    if template.description:
        document["description"] = template.description
    return document


def template_render(document: dict[str, Any], fmt: str = "yaml") -> str:
    """A describe() document as YAML (default) or JSON text."""
    return json_dump(document) if fmt == "json" else yaml_dump(document)


def request_template_list() -> QuerySet[DeviceRequestTemplate]:
    return DeviceRequestTemplate.objects.all()


# ------------------------------------------------------------------ request-template model names

# Kinds of the catalog by request-template device type.
_REQUEST_KINDS = {"GPU": "gpu", "NPU": "npu", "DCU": "dcu", "MLU": "mlu", "HPU": "hpu"}


def _ordered_words(text: str) -> tuple[list[str], set[int]]:
    """Model words in the order written (vendor and family words dropped) and memory sizes in GB."""
    words: list[str] = []
    memory: set[int] = set()
    for token in _SPLIT.split(text.casefold()):
        if not token or token in _NOISE_WORDS or token in _FAMILY_WORDS or _BOARD_REVISION.match(token):
            continue
        size = _MEMORY_TOKEN.match(token)
        if size:
            memory.add(int(size.group(1)))
        elif token not in words:
            words.append(token)
    return words, memory


def _model_words(model: DeviceModel) -> set[str]:
    words: set[str] = set()
    for text in [*_name_variants(model.name), *model.product_names, model.slug]:
        found, _memory = _tokens(text)
        words |= found - _FAMILY_WORDS
    return words


def _memory_gb_match(model: DeviceModel, memory: set[int]) -> bool:
    if not memory:
        return True
    return bool(model.memory_mib) and round(model.memory_mib / 1024) in memory


def _candidates(
    pool: list[DeviceModel], words: list[str], memory: set[int], vocab: dict[int, set[str]]
) -> list[DeviceModel]:
    def has(model: DeviceModel, word: str, *, exact: bool) -> bool:
        return any(t == word or (not exact and t.startswith(word)) for t in vocab[model.pk])

    loose = [m for m in pool if all(has(m, w, exact=False) for w in words) and _memory_gb_match(m, memory)]
    exact = [m for m in loose if all(has(m, w, exact=True) for w in words)]
    return exact or loose


def _family_label(models: list[DeviceModel], fallback: str) -> str:
    prefix = os.path.commonprefix([m.name for m in models]).strip(" -_/")
    return prefix if len(prefix) >= 3 else fallback


def _ref(model: DeviceModel) -> dict[str, str]:
    return {"slug": model.slug, "name": model.name, "vendor": model.vendor}


def request_model_resolve(
    *, device_type: str, model_name: str | None, models: list[DeviceModel] | None = None
) -> dict[str, Any]:
    """Read a request template's model name against the catalog, never silently guessing.

    status:
      ``any``        no model named: any card of the type;
      ``exact``      device_model_match found one model (name, tool name or a safe alias);
      ``inferred``   the looser reading below leaves exactly one model (a warning says how);
      ``family``     several models fit ("Ascend-910B" -> 910B1/B2/B2C/B3/B4): the raw name is kept,
                     the candidates and their common name are recorded, and a warning is given;
      ``unresolved`` nothing of that type fits: a warning.
    The looser reading drops vendor and family words, lets a word be the start of a model word
    ("910b" -> "910b3"), requires a memory size when one is written ("40G"), and if that finds
    nothing drops trailing words that no candidate carries ("A100-NVL-40G": "NVL" is ignored, leaving
    A100 40GB PCIe and A100 40GB SXM4). ``models``: the catalog, loaded once by the caller.
    """
    kind = _REQUEST_KINDS.get((device_type or "").upper())
    result: dict[str, Any] = {
        "type": device_type,
        "model": model_name,
        "status": "any",
        "device_model": None,
        "family": None,
        "vendor": None,
        "candidates": [],
        "ignored_words": [],
        "other_kinds": [],
    }
    if not model_name:
        return result
    catalog = list(DeviceModel.objects.all()) if models is None else models
    pool = [m for m in catalog if m.kind == kind]

    hits: dict[int, DeviceModel] = {}
    folded = model_name.strip().casefold()
    for model in pool:
        if model.slug == folded:
            hits[model.pk] = model
    if not hits:
        for vendor in sorted({m.vendor for m in pool}):
            model = device_model_match(vendor=vendor, raw_name=model_name)
            if model is not None and model.kind == kind:
                hits[model.pk] = model
    if len(hits) == 1:
        model = next(iter(hits.values()))
        result.update(status="exact", device_model=_ref(model), vendor=model.vendor, candidates=[_ref(model)])
        return result

    words, memory = _ordered_words(model_name)
    vocab = {m.pk: _model_words(m) for m in catalog}
    candidates: list[DeviceModel] = list(hits.values())
    used = words
    if not candidates and words and len(memory) <= 1:
        for end in range(len(words), 0, -1):
            used = words[:end]
            candidates = _candidates(pool, used, memory, vocab)
            if candidates:
                break
    if candidates:
        candidates.sort(key=lambda m: (m.vendor, m.name))
        vendors = {m.vendor for m in candidates}
        result.update(
            candidates=[_ref(m) for m in candidates],
            vendor=next(iter(vendors)) if len(vendors) == 1 else None,
            ignored_words=[w for w in words if w not in used],
        )
        if len(candidates) == 1:
            result.update(status="inferred", device_model=_ref(candidates[0]))
        else:
            result.update(status="family", family=_family_label(candidates, model_name))
        return result

    result["status"] = "unresolved"
    if words:
        others = _candidates([m for m in catalog if m.kind != kind], words, memory, vocab)
        result["other_kinds"] = sorted({m.kind.upper() for m in others})
    return result


# The warnings are stored on the request template (``DeviceRequestTemplate.warnings``) and shown in the
# reader's language (apps.core.stored_text); what the document said is shown as written.
MODEL_INFERRED = stored("%(user_path)s: %(user_raw)s is not an exact catalog name; read as %(user_names)s")
MODEL_FAMILY = stored(
    "%(user_path)s: %(user_raw)s is not one catalog model; kept as written and read as the %(user_family)s "
    "family (%(count)s candidates: %(user_names)s)"
)
MODEL_UNRESOLVED = stored(
    "%(user_path)s: %(user_raw)s matches no %(type)s model in the catalog; kept as written, it cannot be "
    "placed until the catalog knows it or the name is corrected"
)
MODEL_OTHER_KIND = stored(
    "%(user_path)s: %(user_raw)s matches no %(type)s model in the catalog (the catalog has it as "
    "%(user_other)s, not %(type)s); kept as written, it cannot be placed until the catalog knows it or the "
    "name is corrected"
)
MODEL_IGNORED_WORDS = stored(
    "%(warning)s; the word(s) %(user_words)s match no catalog model of this kind and were ignored"
)


def request_model_warning(path: str, resolution: dict[str, Any]) -> str | None:
    """The warning for one device group's resolution (None when it is exact or no model was named)."""
    status = resolution["status"]
    raw = resolution["model"]
    names = ", ".join(c["name"] for c in resolution["candidates"])
    ignored = resolution.get("ignored_words") or []
    params = {"user_path": path, "user_raw": repr(raw), "user_names": names}

    def noted(warning: str) -> str:
        if not ignored:
            return warning
        words = ", ".join(repr(w) for w in ignored)
        return MODEL_IGNORED_WORDS % {"warning": warning, "user_words": words}

    if status == "inferred":
        return noted(MODEL_INFERRED % params)
    if status == "family":
        family = {"user_family": resolution["family"], "count": len(resolution["candidates"])}
        return noted(MODEL_FAMILY % {**params, **family})
    if status == "unresolved":
        other = resolution.get("other_kinds") or []
        if other:
            return MODEL_OTHER_KIND % {**params, "type": resolution["type"], "user_other": "/".join(other)}
        return MODEL_UNRESOLVED % {**params, "type": resolution["type"]}
    return None
