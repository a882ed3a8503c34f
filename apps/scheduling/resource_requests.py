"""A job's resource request (which cards, how many, what share): validated, described in words, checked
for feasibility at submission, and turned into the engine's placement Requests."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from django.utils.translation import gettext as _

from apps.catalog.models import ComputeTemplate, DeviceModel, Vendor
from apps.catalog.partitions import MIG, mig_compute_milli, partition_profile, profile_kind
from apps.catalog.selectors import coefficients_on
from apps.clusters import sharing
from apps.core.errors import ValidationFailed
from apps.core.formatting import plain_decimal
from apps.core.stored_text import localize
from apps.inventory.vendors import ADAPTERS
from apps.jobs.models import Job
from apps.scheduling.engine.model import WHOLE, DeviceGroup, Isolation, Request, Toleration, TopologyPolicy

_KIND_BY_TYPE = {"GPU": "gpu", "NPU": "npu", "DCU": "dcu", "MLU": "mlu", "HPU": "hpu"}
# Features a device request template may name, mapped to the catalog's feature flags.
_NEEDS = {"RDMA": "rdma", "ROCE": "rdma", "NVLINK": "nvlink", "MIG": "mig", "HCCS": "hccs"}


@dataclass(frozen=True)
class Feasibility:
    ok: bool
    reason: str = ""
    compute_units: Decimal | None = None


def _vendor_tolerations(vendors: set[str]) -> tuple[Toleration, ...]:
    """The platform knows which accelerator a request targets, so it tolerates that vendor's taint."""
    out = []
    for vendor in sorted(vendors or ADAPTERS):
        adapter = ADAPTERS.get(vendor)
        if adapter is None:
            continue
        for taint in adapter.taints():
            out.append(
                Toleration(key=taint["key"], operator="Equal", value=taint["value"], effect=taint["effect"])
            )
    return tuple(out)


GRAY_TAINT_KEY = "suanchi.io/gray"


def _user_tolerations(job: Job) -> tuple[Toleration, ...]:
    out = []
    if job.gray_opt_in:  # opted-in jobs tolerate the gray-release pool's taint
        out.append(Toleration(key=GRAY_TAINT_KEY, operator="Exists"))
    for t in job.tolerations or []:
        out.append(
            Toleration(
                key=t.get("key", ""),
                operator=t.get("operator", "Equal"),
                value=t.get("value", ""),
                effect=t.get("effect", ""),
            )
        )
    return tuple(out)


def _model_label(model: DeviceModel) -> str:
    return model.name


def request_validate(job: Job) -> None:
    """Field-level rules for each request kind (400 with field errors)."""
    errors: dict[str, list[str]] = {}
    kind = job.request_kind
    if kind == Job.RequestKind.TEMPLATE:
        if job.template_id is None:
            errors["template"] = [_("Choose a compute template.")]
        elif job.template.is_retired:
            errors["template"] = [_("Template %(name)s is retired.") % {"name": job.template.label}]
    elif kind == Job.RequestKind.WHOLE_CARDS:
        if (
            job.device_model_id is None
            and not job.vendor
            and not job.min_memory_mib
            and not job.required_features
        ):
            errors["device_model"] = [
                _("Name a device model, or attributes (vendor, minimum memory, features).")
            ]
        if job.vendor and job.vendor not in Vendor.values:
            errors["vendor"] = [
                _("Unknown vendor %(vendor)s; choose one of %(choices)s.")
                % {"vendor": job.vendor, "choices": ", ".join(Vendor.values)}
            ]
    elif kind == Job.RequestKind.COMPUTE_UNITS:
        if job.compute_units is None or job.compute_units <= 0:
            errors["compute_units"] = [_("Give a positive number of compute units.")]
        unknown = [v for v in job.allowed_vendors or [] if v not in Vendor.values]
        if unknown:
            errors["allowed_vendors"] = [_("Unknown vendors: %(vendors)s.") % {"vendors": ", ".join(unknown)}]
    elif kind == Job.RequestKind.REQUEST_TEMPLATE and job.request_template_id is None:
        errors["request_template"] = [_("Choose a device request template.")]
    elif kind == Job.RequestKind.PROFILE:
        if job.workload_profile_id is None:
            errors["workload_profile"] = [_("Choose a workload profile.")]
        if job.target_throughput is None or job.target_throughput <= 0:
            errors["target_throughput"] = [_("Give a positive target throughput.")]
        if job.target_latency_ms is not None and job.target_latency_ms <= 0:
            errors["target_latency_ms"] = [_("A latency bound must be positive.")]
        unknown = [v for v in job.allowed_vendors or [] if v not in Vendor.values]
        if unknown:
            errors["allowed_vendors"] = [_("Unknown vendors: %(vendors)s.") % {"vendors": ", ".join(unknown)}]
    if job.kind == Job.Kind.BENCHMARK and job.workload_profile_id is None:
        errors["workload_profile"] = [_("A benchmark run names the workload profile it measures.")]
    if job.count < 1:
        errors["count"] = [_("Count must be at least 1.")]
    if errors:
        raise ValidationFailed(_("The request is invalid."), details=errors)


def _cu_alternatives(
    job: Job, models: list[DeviceModel], coefficients: dict[int, Decimal]
) -> list[tuple[DeviceGroup, Decimal]]:
    """Neutral compute units → concrete shapes per model, least over-grant first.

    One slice (share = CU ÷ coefficient) when the request fits one card, else whole cards. A vendor
    whose cards no device-plugin mode shares (``apps.clusters.sharing.FRACTION_MODES``) gets the whole
    card, granted and billed as whole.
    """
    want = Decimal(job.compute_units)
    memory = job.memory_mib or 0
    options: list[tuple[Decimal, DeviceGroup, Decimal]] = []
    for model in models:
        coef = coefficients.get(model.pk)
        if not coef or not model.memory_mib:
            continue
        if want <= coef:
            milli = int((want / coef * WHOLE).to_integral_value(rounding=ROUND_CEILING))
            if not sharing.FRACTION_MODES.get(model.vendor):
                milli = WHOLE  # no plugin mode shares this vendor's card: a slice would be a whole card
            if memory > model.memory_mib:
                continue
            group = DeviceGroup(
                count=1,
                whole=milli >= WHOLE,
                memory_mib=memory,
                compute=min(milli, WHOLE),
                isolation=Isolation.HARD,
                kind=model.kind,
                models={_model_label(model)},
            )
            granted = coef * Decimal(min(milli, WHOLE)) / WHOLE
        else:
            cards = math.ceil(want / coef)
            if memory and math.ceil(memory / cards) > model.memory_mib:
                continue
            group = DeviceGroup(count=cards, whole=True, kind=model.kind, models={_model_label(model)})
            granted = coef * cards
        options.append((granted - want, group, granted))
    options.sort(key=lambda item: (item[0], sorted(item[1].models)))
    return [(group, granted) for _waste, group, granted in options]


def _template_group(template: ComputeTemplate, count: int) -> DeviceGroup:
    model = template.device_model
    whole = (
        template.compute_share >= 100
        and template.isolation == "hard"
        and not template.partition_profile
        and template.max_instances == 1
    )
    milli = int((Decimal(template.compute_share) * 10).to_integral_value(rounding=ROUND_CEILING))
    mig = profile_kind(model, template.partition_profile) == MIG
    if mig:  # the slot share the engine holds, not the rounded percentage (issue 29 §9)
        milli = mig_compute_milli(partition_profile(model, template.partition_profile))
    return DeviceGroup(
        count=count,
        whole=whole,
        memory_mib=0 if whole else template.memory_mib,
        compute=WHOLE if whole else max(1, min(milli, WHOLE)),
        isolation=template.isolation,
        kind=model.kind,
        models={_model_label(model)},
        # a MIG profile: the engine places it on a free GPU-instance placement (engine/mig.py)
        profile=template.partition_profile if mig else "",
    )


def _request_template_groups(job: Job) -> tuple[list[DeviceGroup], TopologyPolicy, str]:
    template = job.request_template
    groups: list[DeviceGroup] = []
    problems = []
    resolution = template.resolution or []
    for i, device in enumerate(template.devices):
        res = resolution[i] if i < len(resolution) else {"status": "any", "candidates": []}
        kind = _KIND_BY_TYPE.get(str(device.get("type", "")).upper())
        models = {c["name"] for c in res.get("candidates", [])}
        if res.get("status") == "unresolved":
            problems.append(f"spec.devices[{i}].model {device.get('model')!r} matches no catalog model")
        needs = {_NEEDS.get(str(n).upper(), str(n).lower()) for n in device.get("needs", []) or []}
        shared = bool(device.get("shared"))
        groups.append(
            DeviceGroup(
                count=int(device.get("count", 1)),
                whole=not shared,
                compute=WHOLE // 2 if shared else WHOLE,
                isolation=Isolation.SHARED if shared else Isolation.HARD,
                kind=kind,
                models=models,
                features=needs,
                name=str(device.get("model") or device.get("type") or f"group{i}"),
            )
        )
    policy = template.topology_policy
    placement = policy.get("placement") or "sameNode"
    preferred = policy.get("preferred")
    topology = TopologyPolicy(placement=placement, preferred=preferred if preferred != placement else None)
    return groups, topology, "; ".join(problems)


class Granted(Decimal):
    """Compute units per hour of one alternative, carrying the library evidence that ranked it
    (``evidence``: a trace step for the decision — which measurement decided, at what cost)."""

    evidence: dict | None = None


def _profile_alternatives(job: Job) -> list[tuple[DeviceGroup, Decimal, str]]:
    """Profile + target → shapes ranked by the benchmark library's cost per unit of work.

    Only options with data (measured, or estimated by the library's stated rule) become alternatives;
    the scheduler tries them cheapest first, so the job lands on the cheapest model that fits now.
    """
    from apps.benchlib.recommend import recommend
    from apps.quotas.library import quota_ceiling

    answer = recommend(
        profile=job.workload_profile,
        target=job.target_throughput,
        latency_ms=job.target_latency_ms,
        vendors=list(job.allowed_vendors or []),
        project_id=job.project_id,
        quota_ceiling=quota_ceiling,
    )
    out = []
    for rank, option in enumerate(o for o in answer.options if o.has_data and o.cu_per_hour is not None):
        model = option.device_model
        if option.template is not None:
            group = _template_group(option.template, option.instances)
        else:
            group = DeviceGroup(
                count=option.instances, whole=True, kind=model.kind, models={_model_label(model)}
            )
        granted = Granted(option.cu_per_hour * job.replicas)
        granted.evidence = {
            "message": _(
                "benchmark library: %(option)s ranked %(rank)s by %(ranked_by)s for %(target)s %(unit)s of "
                "%(profile)s (%(basis)s, %(count)s measurement(s), deciding measurement #%(measurement)s)"
            )
            % {
                "option": option.label,
                "rank": rank + 1,
                "ranked_by": answer.ranked_by,
                "target": answer.target,
                "unit": answer.profile.unit,
                "profile": answer.profile.key,
                "basis": option.basis,
                "count": len(option.evidence.measurements),
                "measurement": option.deciding,
            },
            "data": {
                "measurement": option.deciding,
                "measurements": option.evidence.measurements,
                "basis": option.basis,
                "cu_hours_per_million": str(option.cu_hours_per_million),
                "money_per_million": None
                if option.money_per_million is None
                else str(option.money_per_million),
                "synthetic": option.evidence.synthetic,
            },
        }
        out.append((group, granted, model.vendor))
    return out


def library_trace_step(decision, granted) -> None:
    """Add the library's reason to a placed decision of a profile request (no-op for the others)."""
    evidence = getattr(granted, "evidence", None)
    if evidence and decision is not None and decision.placed:
        decision.step("library", evidence["message"], **evidence["data"])


def sharing_refused_nodes(
    groups: tuple[DeviceGroup, ...], vendors: set[str], memo: dict | None = None
) -> dict[str, str]:
    """Node name → why a fraction of ``groups`` cannot be shared there: the NVIDIA cards of a cluster in
    ``dra`` mode whose driver's gate for the fraction's sharing strategy Test connection recorded off
    (``apps.clusters.sharing.dra_gate_refusal``). Empty without such a fraction (no query then).
    ``memo``: the answers of one scheduling cycle, by the fractions' sharing strategies."""
    from apps.inventory.models import Cluster, Node

    isolations = sorted({str(g.isolation) for g in groups if not g.whole and not g.profile})
    if not isolations or (vendors and "nvidia" not in vendors):
        return {}
    if memo is not None:
        key = tuple(isolations)
        if key not in memo:
            memo[key] = sharing_refused_nodes(groups, vendors)
        return memo[key]
    reasons: dict[int, str] = {}
    for cluster in Cluster.objects.filter(device_plugin_modes__nvidia="dra").only(
        "id", "device_plugin_modes", "last_check"
    ):
        reason = next(
            (r for iso in isolations if (r := sharing.dra_gate_refusal("nvidia", "dra", iso, cluster))), ""
        )
        if reason:
            reasons[cluster.pk] = reason
    if not reasons:
        return {}
    rows = (
        Node.objects.filter(cluster_id__in=list(reasons), devices__vendor="nvidia")
        .values_list("name", "cluster_id")
        .distinct()
    )
    return {name: reasons[cluster_id] for name, cluster_id in rows}


def _request(
    groups: tuple[DeviceGroup, ...], vendors: set[str], tol: tuple, base: dict, sharing_check: bool | dict
) -> Request:
    memo = sharing_check if isinstance(sharing_check, dict) else None
    refused = sharing_refused_nodes(groups, set(vendors), memo) if sharing_check is not False else {}
    if refused:
        base = {**base, "precheck_failures": {**refused, **base["precheck_failures"]}}
    return Request(groups=groups, tolerations=tol, **base)


def job_requests(
    job: Job,
    *,
    precheck_failures: dict[str, str] | None = None,
    catalog: list[DeviceModel] | None = None,
    coefficients: dict[int, Decimal] | None = None,
    sharing_check: bool | dict = True,
) -> list[tuple[Request, Decimal | None]]:
    """The engine requests for a job: usually one; neutral compute-unit requests give one per shape.

    Each comes with the compute units per hour it would be granted (None when a coefficient is unknown).
    ``sharing_check``: nodes whose cluster cannot share a card the way a fraction needs (an NVIDIA DRA
    driver whose sharing gate is off: :func:`sharing_refused_nodes`) are excluded with the reason.
    A dict for ``sharing_check`` keeps those answers for the caller's cycle (one query per strategy).
    """
    failures = dict(precheck_failures or {})
    for name in job.excluded_nodes or []:  # an earlier attempt failed there
        failures.setdefault(name, "an earlier attempt of this job failed on this node")
    base = {
        "id": str(job.pk or "new"),
        "replicas": job.replicas,
        "project": job.project.slug if job.project_id else None,
        "node_selector": dict(job.node_selector or {}),
        "precheck_failures": failures,
        "gray_opt_in": bool(job.gray_opt_in),
        "priority": job.priority,
    }
    user_tol = _user_tolerations(job)
    kind = job.request_kind
    if kind == Job.RequestKind.TEMPLATE:
        template = job.template
        group = _template_group(template, job.count)
        coef = (coefficients or coefficients_on([template.device_model_id])).get(template.device_model_id)
        cu = None if coef is None else coef * Decimal(group.compute) / WHOLE * job.count * job.replicas
        tol = _vendor_tolerations({template.device_model.vendor}) + user_tol
        return [(_request((group,), {template.device_model.vendor}, tol, base, sharing_check), cu)]
    if kind == Job.RequestKind.WHOLE_CARDS:
        features = set(job.required_features or [])
        if job.device_model_id:
            models = {_model_label(job.device_model)}
            vendors = {job.device_model.vendor}
            mkind = job.device_model.kind
        else:
            models = set()
            vendors = {job.vendor} if job.vendor else set()
            mkind = None
        group = DeviceGroup(
            count=job.count,
            whole=True,
            memory_mib=job.min_memory_mib or 0,
            kind=mkind,
            vendors=vendors,
            models=models,
            features=features,
        )
        cu = None
        if job.device_model_id:
            coef = (coefficients or coefficients_on([job.device_model_id])).get(job.device_model_id)
            cu = None if coef is None else coef * job.count * job.replicas
        tol = _vendor_tolerations(vendors) + user_tol
        return [(_request((group,), vendors, tol, base, sharing_check), cu)]
    if kind == Job.RequestKind.COMPUTE_UNITS:
        allowed = set(job.allowed_vendors or [])
        catalog = catalog if catalog is not None else list(DeviceModel.objects.all())
        models = [m for m in catalog if not allowed or m.vendor in allowed]
        coefficients = coefficients or coefficients_on([m.pk for m in models])
        out = []
        for group, granted in _cu_alternatives(job, models, coefficients):
            vendor = next(m.vendor for m in models if m.name in group.models)
            tol = _vendor_tolerations({vendor}) + user_tol
            out.append((_request((group,), {vendor}, tol, base, sharing_check), granted * job.replicas))
        return out
    if kind == Job.RequestKind.PROFILE:
        out = []
        for group, granted, vendor in _profile_alternatives(job):
            tol = _vendor_tolerations({vendor}) + user_tol
            out.append((_request((group,), {vendor}, tol, base, sharing_check), granted))
        return out
    groups, topology, _problems = _request_template_groups(job)
    vendors = set()
    for res in job.request_template.resolution or []:
        vendors |= {c["vendor"] for c in res.get("candidates", [])}
    tol = _vendor_tolerations(vendors) + user_tol
    return [(_request(tuple(groups), vendors, tol, {**base, "topology": topology}, sharing_check), None)]


def request_describe(job: Job) -> str:
    """The request in words, in the active language (pages, the submit preview, the API)."""
    kind = job.request_kind
    reps = _(" × %(n)s replicas") % {"n": job.replicas} if job.replicas > 1 else ""
    if kind == Job.RequestKind.TEMPLATE:
        return (
            _("%(count)s × template %(template)s (%(model)s)")
            % {
                "count": job.count,
                "template": job.template.label,
                "model": job.template.device_model.name,
            }
            + reps
        )
    if kind == Job.RequestKind.WHOLE_CARDS:
        what = job.device_model.name if job.device_model_id else (job.vendor or _("any vendor"))
        extra = []
        if job.min_memory_mib:
            extra.append(f"≥ {job.min_memory_mib // 1024} GiB")
        if job.required_features:
            extra.append("+".join(job.required_features))
        text = _("%(count)s whole card(s) of %(what)s") % {"count": job.count, "what": what}
        return text + (f" ({', '.join(extra)})" if extra else "") + reps
    if kind == Job.RequestKind.PROFILE:
        vendors = ", ".join(job.allowed_vendors) if job.allowed_vendors else _("any vendor")
        text = _("%(target)s %(unit)s of %(profile)s on %(vendors)s") % {
            "target": f"{job.target_throughput.normalize():f}" if job.target_throughput else "?",
            "unit": job.workload_profile.unit if job.workload_profile_id else "",
            "profile": job.workload_profile.key if job.workload_profile_id else "?",
            "vendors": vendors,
        }
        if job.target_latency_ms:
            text += _(", p99 ≤ %(ms)s ms") % {"ms": f"{job.target_latency_ms.normalize():f}"}
        return text + reps
    if kind == Job.RequestKind.COMPUTE_UNITS:
        vendors = ", ".join(job.allowed_vendors) if job.allowed_vendors else _("any vendor")
        mem = f" + {memory_text(job.memory_mib)}" if job.memory_mib else ""
        return (
            _("%(cu)s CU%(memory)s on %(vendors)s")
            % {
                "cu": plain_decimal(job.compute_units),
                "memory": mem,
                "vendors": vendors,
            }
            + reps
        )
    return _("request template %(name)s") % {"name": job.request_template.name} + reps


def memory_text(mib: int) -> str:
    """Memory as a person wrote it: whole GiB as GiB ("5000 GiB", not "5120000 MiB"), else MiB."""
    mib = int(mib)
    if mib >= 1024 and mib % 1024 == 0:
        return _("%(n)s GiB") % {"n": mib // 1024}
    return _("%(n)s MiB") % {"n": mib}


def _beyond_every_node(job: Job) -> str:
    """Why a compute-unit request fits no node however empty ("" when some node is big enough): each
    replica is placed on one node, so the most it can get is the node with the most compute units of
    one allowed model (healthy cards the reader's project may use are not told apart here: this is
    about the fleet's shape, the engine's explanation covers the rest)."""
    from django.db.models import Count

    from apps.inventory.models import Device

    cards = Device.objects.exclude(health__in=[Device.Health.RETIRED, Device.Health.LOST]).filter(
        device_model__isnull=False
    )
    if job.allowed_vendors:
        cards = cards.filter(vendor__in=job.allowed_vendors)
    rows = list(cards.values("node__name", "device_model_id", "device_model__name").annotate(n=Count("id")))
    coefficients = coefficients_on({row["device_model_id"] for row in rows})
    best = max(
        (
            (coefficients[row["device_model_id"]] * row["n"], row)
            for row in rows
            if row["device_model_id"] in coefficients
        ),
        key=lambda item: item[0],
        default=None,
    )
    want = Decimal(job.compute_units)
    if best is None or want <= best[0]:
        return ""
    most, row = best
    return _(
        "%(want)s CU is more than any node can give one replica: the most is %(most)s CU (%(cards)s × "
        "%(model)s on %(node)s). Ask for at most %(most)s CU per replica, or spread the work over more "
        "replicas."
    ) % {
        "want": plain_decimal(want),
        "most": plain_decimal(most, 2),
        "cards": row["n"],
        "model": row["device_model__name"],
        "node": row["node__name"],
    }


def request_feasible_anywhere(job: Job) -> Feasibility:
    """Could any node of the fleet, empty and healthy, ever take this request? If not, why."""
    from apps.scheduling.engine.engine import Engine
    from apps.scheduling.snapshot import fleet_snapshot

    if job.request_kind == Job.RequestKind.REQUEST_TEMPLATE:
        _groups, _topology, problems = _request_template_groups(job)
        if problems:
            return Feasibility(False, problems)
    alternatives = job_requests(job)
    if not alternatives and job.request_kind == Job.RequestKind.PROFILE:
        return Feasibility(
            False,
            _(
                "the benchmark library has no measurement of %(profile)s on any device model of the fleet that "
                "could reach %(target)s %(unit)s"
            )
            % {
                "profile": job.workload_profile.key,
                "target": job.target_throughput,
                "unit": job.workload_profile.unit,
            },
        )
    if not alternatives:
        allowed = ", ".join(job.allowed_vendors) if job.allowed_vendors else _("any vendor")
        wanted = _("%(cu)s CU") % {"cu": plain_decimal(job.compute_units)}
        if job.memory_mib:
            wanted = _("%(cu)s CU with %(memory)s") % {
                "cu": plain_decimal(job.compute_units),
                "memory": memory_text(job.memory_mib),
            }
        return Feasibility(
            False,
            _(
                "no device model of %(vendors)s with a known compute coefficient and memory can provide %(what)s"
            )
            % {"vendors": allowed, "what": wanted},
        )
    if (job.runtime_requirement or "").strip():
        # The same runtime precheck the cycle applies: a runtime no node's driver supports (or that the
        # compatibility table does not know) would wait forever, so it is refused here with the reasons.
        from apps.core.errors import ApplicationError
        from apps.scheduling.prechecks import Prechecks

        try:
            failures = Prechecks().failures(job)
        except ApplicationError as exc:
            return Feasibility(False, exc.message)
        if failures:
            alternatives = job_requests(job, precheck_failures=failures)
    snapshot = fleet_snapshot(empty=True, gray_opt_in=True)
    engine = Engine(policy="bestfit", explain=True)
    explanation = ""
    for request, cu in alternatives:
        decision = engine.place(snapshot, request, commit=False)
        if decision.placed:
            return Feasibility(True, "", cu)
        explanation = explanation or decision.explanation
    # Nothing fits. Would it, were the cards shareable where the clusters' drivers cannot share them?
    # Then that is the reason, with the options (apps.clusters.sharing.dra_gate_refusal).
    refusals = [
        (request, reason)
        for request, _cu in alternatives
        for reason in [next(iter(sharing_refused_nodes(request.groups, set()).values()), "")]
        if reason
    ]
    if job.request_kind == Job.RequestKind.COMPUTE_UNITS:
        too_big = _beyond_every_node(job)
        if too_big:
            return Feasibility(False, too_big)
    for request, reason in refusals:
        plain = dataclasses.replace(
            request,
            precheck_failures=tuple((n, r) for n, r in request.precheck_failures if r != reason),
        )
        if engine.place(snapshot, plain, commit=False).placed:
            return Feasibility(False, localize(reason))
    # The engine explains in English (apps.scheduling.engine_texts): the reason is read in the
    # submitter's language, in the preview and in the submit's refusal.
    return Feasibility(False, localize(explanation) if explanation else _("no node matches"))
