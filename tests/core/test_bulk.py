"""apps.core.bulk: the rows COPY writes (copy_create) are the rows bulk_create writes; violations roll
back. ``among`` selects what ``__in`` selects; ``unsaved`` builds what the model's constructor builds."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.catalog.models import DeviceModel
from apps.core.bulk import among, copy_create, unsaved
from apps.inventory.models import Cluster, Device, Node, Pool
from apps.jobs.models import Allocation, Job, JobEvent

pytestmark = pytest.mark.django_db

N = 30  # above the size at which copy_create switches from bulk_create to COPY


@pytest.fixture
def job(make_project):
    return Job.objects.create(project=make_project("bulk"), name="j", image="x", request_kind="whole_cards")


def _events(job, tag: str):
    return [
        JobEvent(
            job=job,
            kind=JobEvent.Kind.STATE,
            from_state="pending",
            to_state="scheduled",
            message=f'{tag} 调度到 node-{i} \\ tab\there "quoted"',
            actor_label="scheduler",
            data={"i": i, "nested": {"list": [1, 2.5, None, "x"]}, "zh": "中文", "empty": {}},
        )
        for i in range(N)
    ]


def _stored(tag: str):
    return [
        (
            e.kind,
            e.from_state,
            e.to_state,
            e.message.replace(tag, ""),
            e.actor_label,
            e.data,
            e.created_at is not None,
        )
        for e in JobEvent.objects.filter(message__startswith=tag).order_by("pk")
    ]


def test_copy_writes_the_same_rows_as_bulk_create(job):
    before = timezone.now()
    JobEvent.objects.bulk_create(_events(job, "A"))
    assert copy_create(_events(job, "B")) == N
    assert _stored("A") == _stored("B")
    assert len(_stored("B")) == N
    # auto_now_add was filled in, keys were assigned by the database
    copied = JobEvent.objects.filter(message__startswith="B")
    assert all(e.created_at >= before for e in copied)
    assert len({e.pk for e in copied}) == N


def test_json_none_and_empty_values_round_trip(job):
    rows = _events(job, "C")
    rows[0].data = {}
    rows[1].data = []
    copy_create(rows)
    stored = list(
        JobEvent.objects.filter(message__startswith="C").order_by("pk").values_list("data", flat=True)
    )
    assert stored[0] == {} and stored[1] == []


def _fleet():
    model = DeviceModel.objects.create(
        vendor="nvidia", kind="gpu", name="A100 80GB SXM4", slug="a100", memory_mib=81920
    )
    cluster = Cluster.objects.create(name="c", slug="c")
    pool = Pool.objects.create(cluster=cluster, name="p", slug="p")
    node = Node.objects.create(cluster=cluster, pool=pool, name="n1")
    return [
        Device.objects.create(node=node, vendor="nvidia", index=i, uuid=f"GPU-{i}", device_model=model)
        for i in range(N)
    ], node


def _allocation(job, device, node, replica):
    return Allocation(
        job=job,
        project_id=job.project_id,
        device=device,
        node=node,
        replica=replica,
        whole_card=True,
        memory_mib=81920,
        compute_milli=1000,
        trace_id=uuid.uuid4(),
        started_at=timezone.now(),
        compute_units=Decimal("1.0000"),
    )


def test_a_constraint_violation_raises_and_writes_nothing(job):
    devices, node = _fleet()
    rows = [_allocation(job, d, node, i) for i, d in enumerate(devices)]
    rows.append(_allocation(job, devices[0], node, 99))  # a second live allocation of a whole card
    with pytest.raises(IntegrityError), transaction.atomic():
        copy_create(rows)
    assert Allocation.objects.count() == 0
    # the same rows without the duplicate go in
    assert copy_create(rows[:-1]) == N
    assert Allocation.objects.filter(released_at__isnull=True).count() == N


def test_mixed_models_are_refused(job):
    devices, node = _fleet()
    rows = [*_events(job, "D"), _allocation(job, devices[0], node, 0)]
    with pytest.raises(TypeError, match="among JobEvent rows"):
        copy_create(rows)
    assert not JobEvent.objects.filter(message__startswith="D").exists()


@pytest.mark.parametrize("field", ["pk", "index", "uuid"])  # an int key, an int column, a text column
def test_among_selects_what_in_selects(field):
    devices, _node = _fleet()
    values = [getattr(d, "pk" if field == "pk" else field) for d in devices[3:20:2]]
    values += [-1] if field != "uuid" else ["GPU-none", "GPU-'quoted' \\ 中文"]  # match nothing
    query = Device.objects.filter(among(field, values))
    sql = str(query.query)
    assert ("= ANY(" in sql) == (connection.vendor == "postgresql")
    got = sorted(query.values_list("pk", flat=True))
    assert got == sorted(Device.objects.filter(**{f"{field}__in": values}).values_list("pk", flat=True))
    assert got == sorted(d.pk for d in devices[3:20:2])
    assert not Device.objects.filter(among(field, [])).exists()
    assert Device.objects.exclude(among(field, values)).count() == N - len(got)


def test_unsaved_builds_what_the_constructor_builds(job):
    now = timezone.now()
    values = {"job_id": job.pk, "kind": JobEvent.Kind.STATE, "message": "m", "data": {"a": 1}}
    built, plain = unsaved(JobEvent, **values), JobEvent(**values)
    fields = [f.attname for f in JobEvent._meta.concrete_fields]
    assert [getattr(built, f) for f in fields] == [getattr(plain, f) for f in fields]
    assert built._state.adding and built.pk is None
    # a callable default is called per instance (no shared dict), as the constructor does
    event = unsaved(JobEvent, job_id=job.pk, kind=JobEvent.Kind.STATE, message="m")
    other = unsaved(JobEvent, job_id=job.pk, kind=JobEvent.Kind.STATE, message="m")
    assert event.data == JobEvent(job=job).data and event.data is not other.data
    assert copy_create([event]) == 1
    assert JobEvent.objects.get(message="m").created_at >= now


def test_unsaved_goes_through_the_constructor_when_init_is_listened_to(job):
    from django.db.models.signals import post_init

    seen = []

    def listener(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(listener, sender=JobEvent)
    try:
        event = unsaved(JobEvent, job_id=job.pk, kind=JobEvent.Kind.STATE, message="heard")
    finally:
        post_init.disconnect(listener, sender=JobEvent)
    assert seen == [event]
    quiet = unsaved(JobEvent, job_id=job.pk, kind=JobEvent.Kind.STATE, message="quiet")
    assert seen == [event]  # no listener: filled without the constructor, the same values
    fields = [f.attname for f in JobEvent._meta.concrete_fields if f.attname != "message"]
    assert [getattr(quiet, f) for f in fields] == [getattr(event, f) for f in fields]


def test_copy_stamps_one_time_on_every_row_and_instance(job):
    before = timezone.now()
    events = _events(job, "T")
    assert copy_create(events) == N
    stamps = {e.created_at for e in events}
    assert len(stamps) == 1 and stamps.pop() >= before  # set on the instances, as save() does
    stored = set(JobEvent.objects.filter(message__startswith="T").values_list("created_at", flat=True))
    assert stored == {events[0].created_at}


def test_json_text_writes_what_json_dumps_writes():
    import json

    from apps.core.bulk import json_text

    values = [
        {},
        [],
        {"a": [1, 2.5, None, True], "b": {"c": "Ascend 910B3 — 昇腾", "d": 1e16}},
        [{"x": '"quoted"\n'}, [], {}],
        {1: "int key"},
        "text",
        0,
        None,
    ]
    for value in values:
        assert json_text(value) == json.dumps(value)
