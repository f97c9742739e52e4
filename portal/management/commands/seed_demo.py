"""Demo data for the embedded run: two tenants, a pool per route, requests in every state.

Safe to run twice: users and pools are updated in place, requests are created only once.
Requests go through the real services, so their audit trail is the real one.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from fleet.models import Pool, Route
from tenants.models import Membership, PlatformRole, Tenant

DEMO_PASSWORD = "demo"

TENANTS = [
    {"slug": "acme-research", "name": "Acme Research", "cost_centre": "CC-4100",
     "contact_email": "gpu-owners@acme.example"},
    {"slug": "globex-ml", "name": "Globex ML", "cost_centre": "CC-7730",
     "contact_email": "ml-platform@globex.example"},
]
POOLS = [
    {"slug": "shared-h100", "name": "Shared H100", "route": Route.SHARED_POOL,
     "gpu_model": "NVIDIA-H100-80GB-HBM3", "capacity_devices": 64,
     "rate_per_device_hour": Decimal("2.50"), "borrowing_limit_devices": 16,
     "cohort": "shared-h100",
     "node_selector": {"aifactory.io/pool": "shared-h100"}},
    {"slug": "dedicated-h100", "name": "Dedicated H100", "route": Route.DEDICATED_BLOCK,
     "gpu_model": "NVIDIA-H100-80GB-HBM3", "capacity_devices": 32,
     "rate_per_device_hour": Decimal("2.20"),
     "node_selector": {"aifactory.io/pool": "dedicated-h100"}},
    {"slug": "confidential-h100", "name": "Confidential H100", "route": Route.CONFIDENTIAL_POOL,
     "gpu_model": "NVIDIA-H100-80GB-HBM3", "capacity_devices": 16,
     "rate_per_device_hour": Decimal("3.10"),
     "node_selector": {"aifactory.io/pool": "confidential-h100",
                       "aifactory.io/bios-profile": "confidential"}},
    {"slug": "mig-a100", "name": "MIG A100", "route": Route.MIG_VCLUSTER,
     "gpu_model": "NVIDIA-A100-SXM4-80GB", "capacity_devices": 16,
     "rate_per_device_hour": Decimal("1.60"), "device_class": "mig.nvidia.com",
     "mig_profiles": ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb"], "cohort": "mig-a100",
     "node_selector": {"aifactory.io/pool": "mig-a100"}},
]
USERS = [
    # username, first, last, platform roles, (tenant slug, membership role)
    ("lead-acme", "Ada", "Lovelace", [], [("acme-research", Membership.Role.LEAD)]),
    ("member-acme", "Alan", "Turing", [], [("acme-research", Membership.Role.MEMBER)]),
    ("lead-globex", "Grace", "Hopper", [], [("globex-ml", Membership.Role.LEAD)]),
    ("admin", "Pat", "Admin", [PlatformRole.Role.PLATFORM_ADMIN], []),
    ("finance", "Fran", "Finance", [PlatformRole.Role.FINANCE], []),
]


class Command(BaseCommand):
    help = "Create demo tenants, pools, users (password 'demo') and requests in every state."

    @transaction.atomic
    def handle(self, *args, **options):
        tenants = {t["slug"]: Tenant.objects.update_or_create(slug=t["slug"], defaults=t)[0]
                   for t in TENANTS}
        from fleet.inventory.services import pool_set_rate

        for p in POOLS:
            fields = dict(p)
            rate = fields.pop("rate_per_device_hour")
            pool, _ = Pool.objects.update_or_create(slug=fields["slug"], defaults=fields)
            if not pool.rate_cards.exists():
                pool_set_rate(pool=pool, rate=rate)
        self._fleet()
        users = {}
        User = get_user_model()
        for username, first, last, platform, memberships in USERS:
            user, _ = User.objects.get_or_create(username=username)
            user.first_name, user.last_name = first, last
            user.email = f"{username}@example.com"
            user.set_password(DEMO_PASSWORD)
            user.save()
            for role in platform:
                PlatformRole.objects.get_or_create(user=user, role=role)
            for slug, role in memberships:
                Membership.objects.update_or_create(user=user, tenant=tenants[slug],
                                                    defaults={"role": role})
            users[username] = user
        from intake.models import CapacityRequest

        if CapacityRequest.objects.exists():
            self.stdout.write("Demo requests exist already; users and pools refreshed.")
            return
        self._requests(tenants, users)
        self._usage()
        self._budgets(tenants)
        from portal.demo_queues import seed_demo_queues

        seed_demo_queues(timezone.now())
        self.stdout.write(self.style.SUCCESS(
            "Demo data ready: sign in as lead-acme, member-acme, lead-globex, admin or finance "
            f"with password '{DEMO_PASSWORD}'."))

    def _fleet(self):
        """Sync a demo fleet through the real sync code, from a dry-run backend."""
        from fleet.inventory.sync import fleet_sync
        from fleet.kube import DryRunBackend
        from portal.demo_fleet import demo_fleet

        backend = DryRunBackend()
        for obj in demo_fleet():
            backend.apply(obj)
        self.stdout.write(fleet_sync(backend=backend).summary())

    def _usage(self):
        """Rate cards, and 60 days of demo usage for the active allocations.

        The embedded run has no Prometheus, so the used hours are synthetic here (a daily
        rhythm around the request's expected utilisation); a real deployment rolls them up
        from DCGM metrics with billing.services.rollup_usage.
        """
        from billing.domain import amount, hour_charge, month_start
        from billing.models import UsageHour
        from billing.services import refresh_months
        from fleet.inventory.pricing import rate_at, rate_history
        from fleet.models import Allocation
        from portal.demo_usage import demo_level

        now = timezone.now().replace(minute=0, second=0, microsecond=0)
        rates = rate_history(Pool.objects.values_list("pk", flat=True))
        rows, touched = [], set()
        # Provisioning runs after this command commits, so approved allocations are pending.
        for alloc in Allocation.objects.filter(status__in=("pending", "active")).select_related(
                "request", "pool"):
            start = now - dt.timedelta(days=60)
            Allocation.objects.filter(pk=alloc.pk).update(starts_at=start)
            for h in range(60 * 24):
                hour = start + dt.timedelta(hours=h)
                allocated = alloc.device_equivalents * 3600
                used = (allocated * demo_level(alloc.request.expected_utilisation, hour)
                        ).quantize(Decimal("1"))
                charge = hour_charge(alloc.route, allocated=allocated, used=used,
                                     credit=Decimal(0))
                rate = rate_at(rates[alloc.pool_id], hour)
                rows.append(UsageHour(allocation=alloc, tenant_id=alloc.tenant_id,
                                      pool=alloc.pool, hour=hour, allocated_s=allocated,
                                      used_s=used, credit_s=0, charged_s=charge.charged,
                                      rate=rate, amount=amount(charge.charged, rate)))
                touched.add((alloc.pk, month_start(hour)))
        UsageHour.objects.bulk_create(rows, batch_size=2000)
        refresh_months(touched)

    def _budgets(self, tenants):
        """Acme's budget sits just above its run rate: the lead sees spend and forecast."""
        from billing.models import Budget

        Budget.objects.get_or_create(tenant=tenants["acme-research"],
                                     defaults={"monthly_amount": Decimal("24000")})

    def _requests(self, tenants, users):
        from intake import services

        today = timezone.localdate()
        lead_a, lead_g, admin = users["lead-acme"], users["lead-globex"], users["admin"]

        def make(tenant, lead, **fields):
            base = {"workload_kind": "training", "isolation_reference": "", "whole_devices": 0,
                    "replicas": 0, "mig_profile": "", "memory_gb": 0, "gpu_model": "",
                    "starts_on": today, "ends_on": today + dt.timedelta(days=90),
                    "expected_utilisation": 70,
                    "justification": "Demo request created by seed_demo."}
            base.update(fields)
            return services.request_create(tenant=tenants[tenant], by=lead, fields=base)

        make("acme-research", lead_a, title="Tokenizer experiments", device_fill="small",
             isolation_origin="habitual", replicas=2, mig_profile="1g.10gb",
             workload_kind="notebook")
        r = make("acme-research", lead_a, title="LLM pre-training run", device_fill="full",
                 isolation_origin="habitual", whole_devices=16, expected_utilisation=85)
        services.request_submit(request=r, by=lead_a)
        r = make("acme-research", lead_a, title="Clinical notes fine-tune", device_fill="full",
                 isolation_origin="regulatory", isolation_reference="GDPR Art. 9 health data",
                 whole_devices=8, workload_kind="fine_tuning", expected_utilisation=40)
        services.request_submit(request=r, by=lead_a)
        services.request_approve(request=r, by=admin,
                                 reason="Health data: a dedicated block is required.")
        r = make("globex-ml", lead_g, title="Eval harness", device_fill="small",
                 isolation_origin="habitual", replicas=6, memory_gb=18,
                 workload_kind="evaluation", expected_utilisation=30)
        services.request_submit(request=r, by=lead_g)
        services.request_approve(request=r, by=admin, reason="Fits the MIG pool; approved.")
        r = make("globex-ml", lead_g, title="Customer-isolated inference", device_fill="small",
                 isolation_origin="contractual", isolation_reference="MSA-2026-114 §7.2",
                 replicas=2, mig_profile="2g.20gb", workload_kind="inference")
        services.request_submit(request=r, by=lead_g)
        r = make("globex-ml", lead_g, title="Own cluster please", device_fill="full",
                 isolation_origin="habitual", whole_devices=40, expected_utilisation=20)
        services.request_submit(request=r, by=lead_g)
        services.request_request_changes(
            request=r, by=admin, reason="40 devices at 20% expected use: start with 8 in the "
            "shared pool and borrow when peers are idle.")
        r = make("globex-ml", lead_g, title="Weekend hackathon", device_fill="full",
                 isolation_origin="habitual", whole_devices=4, workload_kind="notebook",
                 ends_on=today + dt.timedelta(days=3))
        services.request_submit(request=r, by=lead_g)
        services.request_deny(request=r, by=admin,
                              reason="Notebooks should use MIG slices; please refile as small.")
        r = make("acme-research", lead_a, title="Team training quota", device_fill="full",
                 isolation_origin="habitual", whole_devices=4, expected_utilisation=75)
        services.request_submit(request=r, by=lead_a)
        services.request_approve(request=r, by=admin, reason="Shared pool quota; borrows "
                                 "from the cohort when peers are idle.")
        r = make("globex-ml", lead_g, title="Batch scoring quota", device_fill="full",
                 isolation_origin="habitual", whole_devices=4, workload_kind="inference",
                 expected_utilisation=60)
        services.request_submit(request=r, by=lead_g)
        services.request_approve(request=r, by=admin, reason="Shared pool quota.")
