"""factory_boy factories and small builders that go through the real services."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from billing.domain import month_start
from billing.models import UsageHour
from fleet.allocations.manifests import AllocationSpec
from fleet.models import Cluster, Pool, Route
from tenants.models import Membership, PlatformRole, Tenant


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    first_name = factory.Faker("first_name")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.test")
    password = factory.django.Password("pw-for-tests")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())
    cost_centre = "CC-1"


class ClusterFactory(factory.django.DjangoModelFactory):
    """A registered cluster, a dry run unless told otherwise (nothing to reach here)."""

    class Meta:
        model = Cluster
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"cluster-{n}")
    name = factory.LazyAttribute(lambda o: f"Cluster {o.slug}")
    connection = Cluster.Connection.DRY_RUN


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool
        django_get_or_create = ("slug",)
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"pool-{n}")
    name = factory.LazyAttribute(lambda o: o.slug)
    route = Route.SHARED_POOL
    gpu_model = "NVIDIA-H100-80GB-HBM3"
    devices_per_node = 8
    capacity_devices = 32

    @factory.post_generation
    def rate_per_device_hour(pool, create, extracted, **kwargs):
        """The pool's first rate card, from the beginning (prices live only in cards)."""
        if create and not pool.rate_cards.exists():
            from fleet.inventory.pricing import BEGINNING
            from fleet.models import RateCard

            RateCard.objects.create(pool=pool, effective_from=BEGINNING,
                                    rate_per_device_hour=extracted or Decimal("2.00"))


def sync_nodes(pool: Pool, devices: int | None = None, *, prefix: str = "",
               **node_options) -> list[str]:
    """Validated, healthy GPU nodes of 8 devices for `pool` (enough for `devices`, by default
    its configured ceiling), stored by the fleet watch's own code from Node objects shaped as
    the API returns them: a pool promises only what its synced nodes hold."""
    from fleet.inventory.sync import record_node_events
    from fleet.kube import DryRunBackend
    from portal.demo_fleet import demo_node

    per_node = 8  # demo_node's GPU count
    wanted = pool.capacity_devices if devices is None else devices
    names = [f"{prefix or pool.slug}-node-{i:02d}" for i in range(-(-wanted // per_node))]
    nodes = [demo_node(name, pool.slug, pool.gpu_model, **node_options) for name in names]
    record_node_events(nodes, backend=DryRunBackend(), cluster=pool.cluster)
    return names


def make_pools(*, nodes: bool = True) -> dict[str, Pool]:
    """One pool per route; with `nodes`, each with synced validated nodes for its ceiling."""
    pools = {
        Route.SHARED_POOL: PoolFactory(slug="shared", route=Route.SHARED_POOL,
                                       capacity_devices=32, rate_per_device_hour=Decimal("2.50")),
        Route.DEDICATED_BLOCK: PoolFactory(slug="dedicated", route=Route.DEDICATED_BLOCK,
                                           capacity_devices=16,
                                           rate_per_device_hour=Decimal("2.00")),
        Route.CONFIDENTIAL_POOL: PoolFactory(slug="confidential",
                                             route=Route.CONFIDENTIAL_POOL, capacity_devices=8,
                                             rate_per_device_hour=Decimal("3.00")),
        Route.MIG_VCLUSTER: PoolFactory(slug="mig", route=Route.MIG_VCLUSTER,
                                        gpu_model="NVIDIA-A100-SXM4-80GB", capacity_devices=4,
                                        rate_per_device_hour=Decimal("1.40"),
                                        device_class="mig.nvidia.com",
                                        mig_profiles=["1g.10gb", "2g.20gb", "3g.40gb"]),
    }
    if nodes:
        for pool in pools.values():
            sync_nodes(pool, bios=("confidential" if pool.route == Route.CONFIDENTIAL_POOL
                                   else "performance"))
    return pools


def make_lead(tenant: Tenant, username: str):
    user = UserFactory(username=username)
    Membership.objects.update_or_create(user=user, tenant=tenant,
                                        defaults={"role": Membership.Role.LEAD})
    return user


def make_member(tenant: Tenant, username: str):
    user = UserFactory(username=username)
    Membership.objects.update_or_create(user=user, tenant=tenant,
                                        defaults={"role": Membership.Role.MEMBER})
    return user


def make_platform_user(username: str, role: str):
    user = UserFactory(username=username)
    PlatformRole.objects.get_or_create(user=user, role=role)
    return user


def request_fields(**overrides) -> dict:
    today = timezone.localdate()
    fields = {
        "title": "Training run", "workload_kind": "training", "isolation_origin": "habitual",
        "isolation_reference": "", "device_fill": "full", "whole_devices": 4, "replicas": 0,
        "mig_profile": "", "memory_gb": 0, "gpu_model": "", "starts_on": today,
        "ends_on": today + dt.timedelta(days=30), "expected_utilisation": 80,
        "justification": "Because the model will not train itself.",
    }
    fields.update(overrides)
    return fields


def request_body(tenant_slug: str, **overrides) -> dict:
    """The same answers as an API request body (JSON: dates as ISO strings)."""
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v)
            for k, v in request_fields(**overrides).items()} | {"tenant": tenant_slug}


def session_cookie(user) -> str:
    """A signed-in session for `user`, for clients outside Django's test client."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def make_request(tenant: Tenant, lead, *, submit: bool = False, **overrides):
    from intake import services

    req = services.request_create(tenant=tenant, by=lead, fields=request_fields(**overrides))
    if submit:
        req = services.request_submit(request=req, by=lead)
    return req


LAST_MONTH = month_start(month_start(timezone.now()) - dt.timedelta(days=1))


def usage_hour(alloc, hour, allocated, used, amount):
    UsageHour.objects.create(allocation=alloc, tenant=alloc.tenant, pool=alloc.pool, hour=hour,
                             allocated_s=allocated, used_s=used, credit_s=0,
                             charged_s=allocated, rate=Decimal("2.5"), amount=amount)


def form_data(tenant, **kw):
    """A request's fields as the web form posts them."""
    data = {k: ("" if v is None else v) for k, v in request_fields(**kw).items()}
    data["tenant"] = tenant.pk
    return data


def payload(tenant, **kw):
    """A request's fields as the API takes them (JSON)."""
    data = request_fields(**kw)
    data["tenant"] = tenant.slug
    data["starts_on"] = str(data["starts_on"])
    data["ends_on"] = str(data["ends_on"])
    return data


def spec(route: str, **kw) -> AllocationSpec:
    """A small allocation's spec on `route`, as plain data."""
    base = {"allocation_id": 7, "tenant": "acme", "namespace": "acme-r7", "route": route,
            "pool": "p", "gpu_model": "H100", "whole_devices": 2}
    if route == Route.MIG_VCLUSTER:
        base |= {"whole_devices": 0, "mig_profile": "2g.20gb", "mig_count": 3}
    return AllocationSpec(**(base | kw))
