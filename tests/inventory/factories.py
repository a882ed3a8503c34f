"""factory_boy factories for tenancy, catalog and ledger rows. Defaults make valid, unrelated rows."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from apps.accounts.models import Department, Membership, Project
from apps.catalog.models import DeviceKind, DeviceModel, Vendor
from apps.inventory.models import Cluster, Device, Node, Pool

TEST_PASSWORD = "pw-for-tests-1"


class UserFactory(factory.django.DjangoModelFactory):
    """A plain user with the password ``TEST_PASSWORD``; pass ``is_staff=True`` / ``is_superuser=True``."""

    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    is_staff = False
    is_superuser = False

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        password = kwargs.pop("password", TEST_PASSWORD)
        return model_class.objects.create_user(*args, password=password, **kwargs)


class DepartmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Department

    name = factory.Sequence(lambda n: f"Department {n}")
    slug = factory.Sequence(lambda n: f"dept-{n}")


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    department = factory.SubFactory(DepartmentFactory)
    name = factory.Sequence(lambda n: f"Project {n}")
    slug = factory.Sequence(lambda n: f"project-{n}")
    namespace = factory.LazyAttribute(lambda p: p.slug)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    project = factory.SubFactory(ProjectFactory)
    role = Membership.Role.MEMBER


class DeviceModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeviceModel
        django_get_or_create = ("name",)

    vendor = Vendor.NVIDIA
    kind = DeviceKind.GPU
    name = factory.Sequence(lambda n: f"Test GPU {n}")
    slug = factory.LazyAttribute(lambda m: m.name.lower().replace(" ", "-"))
    memory_mib = 81920
    product_names = factory.LazyAttribute(lambda m: [f"NVIDIA {m.name}"])


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Cluster {n}")
    slug = factory.Sequence(lambda n: f"cluster-{n}")


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"Pool {n}")
    slug = factory.Sequence(lambda n: f"pool-{n}")


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    pool = None
    name = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    cpu_arch = "x86_64"
    driver_version = "550.54.15"
    cuda_version = "12.4"


class DeviceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Device

    node = factory.SubFactory(NodeFactory)
    vendor = Vendor.NVIDIA
    device_model = factory.SubFactory(DeviceModelFactory)
    index = factory.Sequence(lambda n: n)
    uuid = factory.Sequence(lambda n: f"GPU-{n:08x}-0000-0000-0000-000000000000")
    serial = factory.Sequence(lambda n: f"SN{n:010d}")
    pci_bus_id = factory.LazyAttribute(lambda d: f"0000:{(d.index % 200) + 0x10:02X}:00.0")
    numa_node = 0
    firmware_version = "96.00.89.00.01"
