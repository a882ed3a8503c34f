"""Why a track could not get its replicas: the shortfall in the ledger's terms (model, pool, shape,
needed vs free, and what holds the other cards).

``apps.scheduling.scaling.inference_scale`` places extra replicas with the engine and returns the
count it reached; it does not say why it stopped. A refused shift or rollback must name the real
shortfall, so this module counts, for the cards the track runs on (same device model, same pool, same
shape per replica), how many are free now and what holds each of the others — busy, being released
(pods still stopping), lost or degraded, on a quarantined / maintenance / draining node, cordoned,
quarantined or gray. On the demo a
migration rollback missed T4 cards that sat on a node a failed gray batch had quarantined; the fleet
page's free compute units (every model together) hid that.

A card is *free* for a whole-card replica when no active allocation touches it; for a shared slice
when no whole card holds it and its free memory and compute share (the pool's overcommit factor
applies to the share, never to memory — DESIGN.md, scheduling) fit the slice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum
from django.utils.translation import gettext as _

from apps.catalog.models import Isolation
from apps.inventory.models import Device, Node
from apps.jobs.models import Allocation, Job
from apps.scheduling.engine.share import overcommit_pct, share_fits


@dataclass
class Shortfall:
    model: str
    pools: list[str]
    whole: bool
    memory_mib: int
    compute_milli: int
    cards_per_replica: int
    needed: int
    total: int
    free: int
    held: Counter = field(default_factory=Counter)  # reason -> cards
    quarantined_nodes: list[str] = field(default_factory=list)
    unavailable_nodes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "pools": self.pools,
            "shape": "whole_card" if self.whole else "shared",
            "memory_mib": self.memory_mib,
            "compute_milli": self.compute_milli,
            "cards_per_replica": self.cards_per_replica,
            "needed_cards": self.needed,
            "free_cards": self.free,
            "total_cards": self.total,
            "held": dict(self.held),
            "quarantined_nodes": self.quarantined_nodes,
            "unavailable_nodes": self.unavailable_nodes,
        }


def _shape(job: Job) -> list[tuple[int | None, int | None, bool, int, int, str]]:
    """One replica's cards as (model id, pool id, whole, memory MiB, compute ‰, isolation): from the
    job's live allocations (what it really holds), else from its request."""
    rows = list(
        Allocation.objects.filter(job=job, attempt=job.attempt, released_at__isnull=True)
        .order_by("replica", "device_id")
        .values_list(
            "replica",
            "device__device_model_id",
            "node__pool_id",
            "whole_card",
            "memory_mib",
            "compute_milli",
            "isolation",
        )
    )
    if rows:
        first = rows[0][0]
        return [(m, p, w, mem, milli, iso) for r, m, p, w, mem, milli, iso in rows if r == first]
    model = job.device_model or (job.template.device_model if job.template_id else None)
    whole = job.request_kind == Job.RequestKind.WHOLE_CARDS
    memory = job.template.memory_mib if job.template_id else (job.memory_mib or 0)
    milli = int(job.template.compute_share * 10) if job.template_id else 1000
    isolation = job.template.isolation if job.template_id else Isolation.HARD
    card = (model.pk if model else None, None, whole, memory, 1000 if whole else milli, isolation)
    return [card] * max(1, job.count or 1)


def _slice_fits(
    use: dict, *, memory_mib: int, capacity_mib: int, milli: int, shared: bool, factor: int
) -> bool:
    """Whether one more slice fits a card already holding ``use`` (memory never overcommitted; the
    compute by the share-fit rule, whose one home is ``apps.scheduling.engine.share``)."""
    if capacity_mib - (use["mem"] or 0) < memory_mib:
        return False
    hard, shared_milli = use["hard"] or 0, use["shared"] or 0
    if shared:
        return share_fits(hard, shared_milli + milli, factor)
    return share_fits(hard + milli, shared_milli, factor)


def track_shortfall(*, job: Job, wanted: int, reached: int) -> Shortfall:
    """What the ledger holds for ``job``'s next ``wanted - reached`` replicas."""
    cards = _shape(job)
    model_ids = {c[0] for c in cards if c[0] is not None}
    pool_ids = {c[1] for c in cards if c[1] is not None}
    whole = any(c[2] for c in cards)
    memory = max(c[3] for c in cards)
    milli = max(c[4] for c in cards)
    shared = any(c[5] == Isolation.SHARED for c in cards)
    devices = (
        Device.objects.filter(device_model_id__in=model_ids)
        .exclude(health=Device.Health.RETIRED)
        .exclude(node__status=Node.Status.RETIRED)
        .select_related("node", "node__pool", "device_model")
        .order_by("node__name", "vendor", "index")
    )
    if pool_ids:
        devices = devices.filter(node__pool_id__in=pool_ids)
    devices = list(devices)
    usage = {
        row["device_id"]: row
        for row in Allocation.objects.filter(device__in=devices, released_at__isnull=True)
        .values("device_id")
        .annotate(
            mem=Sum("memory_mib"),
            hard=Sum("compute_milli", filter=Q(isolation=Isolation.HARD)),
            shared=Sum("compute_milli", filter=Q(isolation=Isolation.SHARED)),
            whole=Count("pk", filter=Q(whole_card=True)),
            rows=Count("pk"),
            releasing=Count("pk", filter=Q(releasing_since__isnull=False)),
        )
    }
    held: Counter = Counter()
    quarantined: dict[str, int] = defaultdict(int)
    unavailable: dict[str, int] = defaultdict(int)
    free = 0
    for device in devices:
        node = device.node
        use = usage.get(device.pk)
        capacity = device.memory_mib or (device.device_model.memory_mib if device.device_model_id else 0) or 0
        factor = overcommit_pct(node.pool.overcommit_factor if node.pool_id else None)
        if device.health == Device.Health.LOST:
            held["lost"] += 1
        elif device.health == Device.Health.DEGRADED:
            held["degraded"] += 1
        elif node.status == Node.Status.QUARANTINED:
            held["quarantined_node"] += 1
            quarantined[node.name] += 1
        elif node.status != Node.Status.READY or node.pending_approval:
            held["unavailable_node"] += 1
            unavailable[node.name] += 1
        elif device.pool_status == Device.PoolStatus.QUARANTINE:
            held["quarantined_card"] += 1
        elif device.cordoned:
            held["cordoned"] += 1
        elif device.pool_status == Device.PoolStatus.GRAY and not job.gray_opt_in:
            held["gray"] += 1
        elif use and (
            whole
            or use["whole"]
            or not _slice_fits(
                use, memory_mib=memory, capacity_mib=capacity, milli=milli, shared=shared, factor=factor
            )
        ):
            # A job let go of it but its pods may still run (apps.scheduling.releasing): held until
            # the cluster confirms they are gone.
            held["releasing" if use["releasing"] == use["rows"] else "busy"] += 1
        else:
            free += 1
    models = sorted({str(d.device_model) if d.device_model_id else d.model_label for d in devices})
    if not models and job.device_model_id:
        models = [job.device_model.name]
    pools = sorted({d.node.pool.name for d in devices if d.node.pool_id})
    return Shortfall(
        model=", ".join(models) or "?",
        pools=pools,
        whole=whole,
        memory_mib=memory,
        compute_milli=milli,
        cards_per_replica=len(cards),
        needed=max(0, wanted - reached) * len(cards),
        total=len(devices),
        free=free,
        held=held,
        quarantined_nodes=sorted(quarantined),
        unavailable_nodes=sorted(unavailable),
    )


def _held_text(short: Shortfall) -> str:
    parts = []
    words = {
        "busy": _("%(n)s busy"),
        "releasing": _("%(n)s being released (pods still stopping)"),
        "lost": _("%(n)s lost"),
        "degraded": _("%(n)s degraded"),
        "quarantined_card": _("%(n)s quarantined"),
        "cordoned": _("%(n)s cordoned"),
        "gray": _("%(n)s in a gray-release batch"),
    }
    for key in ("busy", "releasing", "lost", "degraded", "quarantined_card", "cordoned", "gray"):
        if short.held.get(key):
            parts.append(words[key] % {"n": short.held[key]})
    if short.held.get("quarantined_node"):
        parts.append(
            _("%(n)s on quarantined node(s) %(nodes)s")
            % {"n": short.held["quarantined_node"], "nodes": ", ".join(short.quarantined_nodes)}
        )
    if short.held.get("unavailable_node"):
        parts.append(
            _("%(n)s on node(s) not ready %(nodes)s")
            % {"n": short.held["unavailable_node"], "nodes": ", ".join(short.unavailable_nodes)}
        )
    return ", ".join(parts)


def shortfall_message(*, track: str, job: Job, wanted: int, reached: int, short: Shortfall) -> str:
    """The refusal in the reader's language, naming model, pool, shape, needed vs free and the rest."""
    shape = (
        _("whole %(model)s card(s)") % {"model": short.model}
        if short.whole
        else _("%(model)s card(s) with %(memory)s MiB and %(share)s %% compute free")
        % {"model": short.model, "memory": short.memory_mib, "share": f"{short.compute_milli / 10:g}"}
    )
    counts = {"job": job.name, "reached": reached, "wanted": wanted}
    if track == "source":
        head = (
            _(
                "The source track (job %(job)s) could reach only %(reached)s of %(wanted)s replicas; "
                "nothing was shifted."
            )
            % counts
        )
    else:
        head = (
            _(
                "The target track (job %(job)s) could reach only %(reached)s of %(wanted)s replicas; "
                "nothing was shifted."
            )
            % counts
        )
    pools = ", ".join(short.pools) or _("any pool")
    if short.free >= short.needed:
        tail = _(
            "It needs %(needed)s more %(shape)s in pool %(pools)s; the ledger shows %(free)s of %(total)s "
            "free, but the scheduler placed no more replicas there (node taints, runtime precheck or "
            "topology): the job's scheduling events say why."
        ) % {"needed": short.needed, "shape": shape, "pools": pools, "free": short.free, "total": short.total}
    else:
        params = {
            "needed": short.needed,
            "shape": shape,
            "pools": pools,
            "free": short.free,
            "total": short.total,
            "held": _held_text(short),
        }
        if params["held"]:
            tail = (
                _(
                    "It needs %(needed)s more %(shape)s in pool %(pools)s and %(free)s of the %(total)s "
                    "there are free (the others: %(held)s)."
                )
                % params
            )
        else:
            tail = (
                _(
                    "It needs %(needed)s more %(shape)s in pool %(pools)s and %(free)s of the %(total)s there are free."
                )
                % params
            )
    return f"{head} {tail}"
