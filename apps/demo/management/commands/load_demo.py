"""python manage.py load_demo: demo tenancy, catalog and fleet. Idempotent; works on any database."""

from django.core.management.base import BaseCommand
from django.db import transaction

from apps.catalog.services import catalog_sync, compute_template_sync_builtin
from apps.demo import accounts as accounts_demo
from apps.demo import benchlib as benchlib_demo
from apps.demo import billing as billing_demo
from apps.demo import inventory as inventory_demo
from apps.demo import jobs as jobs_demo
from apps.demo import migration as migration_demo
from apps.demo import quotas as quotas_demo
from apps.demo import rollout as rollout_demo
from apps.scheduling.services import scheduling_cycle_run


class Command(BaseCommand):
    help = "Load the demo departments, projects, users, device catalog and fleet (safe to run again)."

    def handle(self, *args, **options):
        actor = "demo-loader"
        counts = catalog_sync(actor=actor)
        self.stdout.write(f"catalog: {counts}")
        templates = compute_template_sync_builtin(actor=actor)
        self.stdout.write(
            f"compute templates: created {templates['created']}, unchanged {templates['unchanged']}"
        )
        with transaction.atomic():
            credentials = accounts_demo.load(actor=actor, stdout=self.stdout)
            fleet = inventory_demo.load(actor=actor, stdout=self.stdout)
            quotas_demo.load(actor=actor, stdout=self.stdout)
            jobs = jobs_demo.load(actor=actor, stdout=self.stdout)
        cycle = scheduling_cycle_run(actor="scheduler")
        self.stdout.write(
            f"jobs: {jobs} submitted; scheduling cycle: {cycle.placed} placed, {cycle.pending} pending"
        )
        imported = fleet["import"]
        self.stdout.write(
            "fleet: " + ", ".join(f"{k} {v}" for k, v in imported.items() if isinstance(v, int))
        )
        billing_demo.load(actor=actor, stdout=self.stdout)
        rollout_demo.load(actor=actor, stdout=self.stdout)
        migration_demo.load(actor=actor, stdout=self.stdout)
        benchlib_demo.load(actor=actor, stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS("Demo loaded. Sign in with:"))
        for username, password, role in credentials:
            self.stdout.write(f"  {username:<8} {password:<14} {role}")
        if fleet["agent_key"]:
            self.stdout.write(
                f"  node agent token for {fleet['agent_node']} (shown once): {fleet['agent_key']}"
            )
