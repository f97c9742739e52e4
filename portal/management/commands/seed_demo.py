"""Demo data for the embedded run: two tenants, a pool per route, requests in every state,
and two months of history.

The history is made by the production code in time order: with the clock set to each past
moment (portal.demo_clock), requests are filed, decided and provisioned by the real services,
a rate changes, an allocation ends and is retired by the expiry task, the hourly rollup bills
each day from the synthetic use, budget checks run, and finance closes a month with an
adjustment. So everything `make run` shows obeys the same invariants as production
(docs/invariants.md); tests/db/test_invariants.py checks the seeded world too.

Safe to run twice: users and pools are updated in place, history is created only once.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.test.utils import override_settings
from django.utils import timezone

from billing.budgets import budget_set, check_budgets
from billing.domain import month_start
from billing.models import Statement
from billing.services import ratecard_create, rollup_usage, statement_adjust, statement_close
from fleet.allocations.provisioning import allocation_provision
from fleet.allocations.tasks import expire_allocations
from fleet.inventory.services import rate_card_create
from fleet.inventory.sync import fleet_sync
from fleet.kube import DryRunBackend, using_backend
from fleet.models import Cluster, Pool, Route
from fleet.vocabulary import HOME_CLUSTER, LABEL_POOL
from intake import services
from intake.models import CapacityRequest
from portal.demo_clock import clock_at
from portal.demo_fleet import demo_fleet
from portal.demo_queues import seed_demo_queues
from tenants.models import Membership, PlatformRole, Tenant

DEMO_PASSWORD = "demo"

TENANTS = [
    {"slug": "acme-research", "name": "Acme Research", "cost_centre": "CC-4100",
     "contact_email": "gpu-owners@acme.example"},
    {"slug": "globex-ml", "name": "Globex ML", "cost_centre": "CC-7730",
     "contact_email": "ml-platform@globex.example"},
]
# Two clusters, so a newcomer sees the idea: the portal's own (on-prem H100s and A100s) and
# a confidential-compute cluster of its own, reached by a dry run like everything here.
CLUSTERS = [
    {"slug": HOME_CLUSTER, "name": "On-prem Amsterdam", "region": "ams", "provider": "on-prem",
     "connection": Cluster.Connection.CONFIGURED},
    {"slug": "cc-frankfurt", "name": "Confidential Frankfurt", "region": "eu-central-1",
     "provider": "on-prem", "connection": Cluster.Connection.DRY_RUN},
]
CONFIDENTIAL_CLUSTER = "cc-frankfurt"
POOLS = [
    {"slug": "shared-h100", "name": "Shared H100", "route": Route.SHARED_POOL,
     "gpu_model": "NVIDIA-H100-80GB-HBM3", "capacity_devices": 64,
     "rate_per_device_hour": Decimal("2.35"), "borrowing_limit_devices": 16,
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


HISTORY_DAYS = 60
# The shared pool's price rises a month into the history (a rate card from that moment on).
RATE_CHANGE = ("shared-h100", Decimal("2.50"), 31)


class Command(BaseCommand):
    help = ("Create demo tenants, pools, users (password 'demo'), requests in every state and "
            "two months of history made by the real services.")

    @transaction.atomic
    def handle(self, *args, **options):
        now = timezone.now()
        self.origin = (now - dt.timedelta(days=HISTORY_DAYS)).replace(
            hour=8, minute=0, second=0, microsecond=0)
        fresh = not CapacityRequest.objects.exists()
        tenants = {t["slug"]: Tenant.objects.update_or_create(slug=t["slug"], defaults=t)[0]
                   for t in TENANTS}

        with clock_at(self.origin):
            clusters = {c["slug"]: Cluster.objects.update_or_create(
                slug=c["slug"], defaults=c)[0] for c in CLUSTERS}
            for p in POOLS:
                fields = dict(p)
                fields["cluster"] = clusters[CONFIDENTIAL_CLUSTER if fields["route"] ==
                                             Route.CONFIDENTIAL_POOL else HOME_CLUSTER]
                rate = fields.pop("rate_per_device_hour")
                pool, _ = Pool.objects.update_or_create(slug=fields["slug"], defaults=fields)
                if not pool.rate_cards.exists():
                    rate_card_create(pool=pool, rate=rate)
            self._fleet(clusters)
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
        if not fresh:
            self.stdout.write("Demo requests exist already; users and pools refreshed.")
            return


        # The embedded run's synthetic use (there is no Prometheus to ask about the past),
        # and the demo fleet's own dry run: the history is provisioned and retired there,
        # never on a cluster the settings may point at.
        with override_settings(PORTAL_USAGE_SOURCE=settings.PORTAL_USAGE_SOURCE
                               or "portal.demo_usage.used_device_seconds"), \
                using_backend(self.backend):
            self._history(tenants, users, now)
            self._sync(clusters)  # as the beat's sync would have today: the fleet is current
        self.stdout.write(self.style.SUCCESS(
            "Demo data ready: sign in as lead-acme, member-acme, lead-globex, admin or finance "
            f"with password '{DEMO_PASSWORD}'."))

    def _fleet(self, clusters):
        """Sync a demo fleet through the real sync code, from a dry-run backend per cluster
        (the confidential pool's nodes are in a cluster of their own)."""
        backend = self.backend = DryRunBackend()
        elsewhere = self.elsewhere = DryRunBackend()
        confidential = {p["slug"] for p in POOLS if p["route"] == Route.CONFIDENTIAL_POOL}
        objects = demo_fleet(burnt_in_by=self.origin.date())
        pool_of = {o["metadata"]["name"]: o["metadata"]["labels"].get(LABEL_POOL, "")
                   for o in objects if o["kind"] == "Node"}
        for obj in objects:
            node = obj["metadata"]["name"] if obj["kind"] == "Node" else obj["spec"]["nodeName"]
            (elsewhere if pool_of.get(node) in confidential else backend).apply(obj)
        self._sync(clusters)

    def _sync(self, clusters):
        self.stdout.write(fleet_sync(clusters[HOME_CLUSTER], backend=self.backend).summary())
        self.stdout.write(fleet_sync(clusters[CONFIDENTIAL_CLUSTER],
                                     backend=self.elsewhere).summary())

    def _history(self, tenants, users, now):
        """Day by day from the origin to now, each step at its own moment."""
        at = lambda days, hours=0: self.origin + dt.timedelta(days=days, hours=hours)  # noqa: E731
        admin, finance = users["admin"], users["finance"]
        with clock_at(at(0)):
            budget_set(tenant=tenants["acme-research"], amount_value="24000", by=finance)
        with clock_at(at(0, 1)):
            self._quotas(tenants, users)
        # The last fortnight's queue activity (what the queue sync would have recorded from
        # Kueue: admissions, waits, reclaims, hours borrowed), so the daily rollups below
        # bill the borrowing as it happened.
        seed_demo_queues(now)
        slug, rate, day = RATE_CHANGE
        with clock_at(at(day - 3)):  # announced a few days ahead, as a rate change would be
            ratecard_create(pool=Pool.objects.get(slug=slug), rate=rate,
                            effective_from=at(day).replace(hour=0), by=admin)
        closing = month_start(self.origin)
        close_day = (dt.datetime.combine(closing + dt.timedelta(days=32), dt.time(),
                                         tzinfo=dt.UTC).replace(day=2, hour=9)
                     - self.origin).days
        days = (now - self.origin).days
        for d in range(1, days + 1):
            with clock_at(min(at(d), now)):
                expire_allocations()
                rollup_usage(start=at(d - 1), end=at(d))
                check_budgets(timezone.now())
                if d == close_day:
                    self._close(tenants["globex-ml"], closing, finance)
                if d == days - 14:
                    budget_set(tenant=tenants["globex-ml"], amount_value="9000", by=finance)
        with clock_at(now):
            rollup_usage(start=at(days), end=now)
            check_budgets(now)
        self._recent_requests(tenants, users, now)

    def _close(self, tenant, month, finance):
        statement_close(tenant=tenant, month=month, by=finance)
        statement_adjust(statement=Statement.objects.get(tenant=tenant, month=month),
                         by=finance, amount_value=Decimal("-25.00"),
                         reason="Credit for the two-hour maintenance window on the 14th.")

    def _make(self, tenants, users):
        today = timezone.localdate()

        def make(tenant, lead, **fields):
            base = {"workload_kind": "training", "isolation_reference": "", "whole_devices": 0,
                    "replicas": 0, "mig_profile": "", "memory_gb": 0, "gpu_model": "",
                    "starts_on": today, "ends_on": today + dt.timedelta(days=90),
                    "expected_utilisation": 70,
                    "justification": "Demo request created by seed_demo."}
            base.update(fields)
            return services.request_create(tenant=tenants[tenant], by=users[lead],
                                           fields=base)
        return make

    def _approve(self, request, reason):
        """Approve, then provision at once (the task the approval queues, run in place so it
        happens at the same simulated moment; the queued copy later finds it done)."""
        users = self._users
        services.request_submit(request=request, by=self._lead_of[request.tenant.slug])
        request = services.request_approve(request=request, by=users["admin"], reason=reason)
        allocation_provision(request.allocation_id)
        return request

    def _quotas(self, tenants, users):
        """What runs through the whole history: four allocations, one per route, approved
        at the origin; and a fortnight's sweep that ends and is retired by the expiry task."""
        self._users = users
        self._lead_of = {"acme-research": users["lead-acme"], "globex-ml": users["lead-globex"]}
        make = self._make(tenants, users)
        long = {"ends_on": timezone.localdate() + dt.timedelta(days=150)}
        self._approve(make("acme-research", "lead-acme", title="Clinical notes fine-tune",
                           device_fill="full", isolation_origin="regulatory",
                           isolation_reference="GDPR Art. 9 health data", whole_devices=8,
                           workload_kind="fine_tuning", expected_utilisation=40, **long),
                      "Health data: a dedicated block is required.")
        self._approve(make("globex-ml", "lead-globex", title="Eval harness",
                           device_fill="small", isolation_origin="habitual", replicas=6,
                           memory_gb=18, workload_kind="evaluation", expected_utilisation=30,
                           **long), "Fits the MIG pool; approved.")
        self._approve(make("acme-research", "lead-acme", title="Team training quota",
                           device_fill="full", isolation_origin="habitual", whole_devices=4,
                           expected_utilisation=75, **long),
                      "Shared pool quota; borrows from the cohort when peers are idle.")
        self._approve(make("globex-ml", "lead-globex", title="Batch scoring quota",
                           device_fill="full", isolation_origin="habitual", whole_devices=4,
                           workload_kind="inference", expected_utilisation=60, **long),
                      "Shared pool quota.")
        self._approve(make("acme-research", "lead-acme", title="Ablation sweep",
                           device_fill="full", isolation_origin="habitual", whole_devices=2,
                           expected_utilisation=90,
                           ends_on=timezone.localdate() + dt.timedelta(days=13)),
                      "Two weeks in the shared pool.")

    def _recent_requests(self, tenants, users, now):
        """The requests still in play, filed over the last days."""
        admin = users["admin"]
        ago = lambda days: now - dt.timedelta(days=days)  # noqa: E731
        with clock_at(ago(10)):
            make = self._make(tenants, users)
            r = make("globex-ml", "lead-globex", title="Weekend hackathon", device_fill="full",
                     isolation_origin="habitual", whole_devices=4, workload_kind="notebook",
                     ends_on=timezone.localdate() + dt.timedelta(days=3))
            services.request_submit(request=r, by=users["lead-globex"])
        with clock_at(ago(9)):
            services.request_deny(request=r, by=admin, reason="Notebooks should use MIG "
                                  "slices; please refile as small.")
        with clock_at(ago(4)):
            make = self._make(tenants, users)
            r = make("globex-ml", "lead-globex", title="Own cluster please", device_fill="full",
                     isolation_origin="habitual", whole_devices=40, expected_utilisation=20)
            services.request_submit(request=r, by=users["lead-globex"])
        with clock_at(ago(3)):
            services.request_request_changes(
                request=r, by=admin, reason="40 devices at 20% expected use: start with 8 in "
                "the shared pool and borrow when peers are idle.")
        with clock_at(ago(2)):
            make = self._make(tenants, users)
            r = make("acme-research", "lead-acme", title="LLM pre-training run",
                     device_fill="full", isolation_origin="habitual", whole_devices=16,
                     expected_utilisation=85)
            services.request_submit(request=r, by=users["lead-acme"])
        with clock_at(ago(1)):
            make = self._make(tenants, users)
            r = make("globex-ml", "lead-globex", title="Customer-isolated inference",
                     device_fill="small", isolation_origin="contractual",
                     isolation_reference="MSA-2026-114 §7.2", replicas=2,
                     mig_profile="2g.20gb", workload_kind="inference")
            services.request_submit(request=r, by=users["lead-globex"])
        make = self._make(tenants, users)
        make("acme-research", "lead-acme", title="Tokenizer experiments", device_fill="small",
             isolation_origin="habitual", replicas=2, mig_profile="1g.10gb",
             workload_kind="notebook")
