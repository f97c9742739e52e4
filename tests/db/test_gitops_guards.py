"""In GitOps mode a cluster's shared admission guards are one directory, made from the
database when it is committed: the policies of every guarded route in use there and the
check, once. Each guarded allocation's check params sit in its own directory, so an added
block changes only its own files, and its retirement (its directory removed) takes them."""

from __future__ import annotations

import datetime as dt
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from fleet.allocations import gitops
from fleet.allocations.admission import is_guard_params, params_entries
from fleet.allocations.desired import allocation_manifests
from fleet.allocations.git_sink import allocation_files, cluster_guards, gitops_progress
from fleet.allocations.guard_check import is_guard_check
from fleet.allocations.manifests import is_guard_object
from fleet.kube import DryRunBackend
from fleet.models import Allocation, GpuNode, Route
from tenants.models import AuditEvent
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _block(tenant, pool, namespace, node):
    alloc = Allocation.objects.create(
        tenant=tenant, pool=pool, route=Route.DEDICATED_BLOCK, whole_devices=8,
        device_equivalents=Decimal(8), namespace=namespace, status="active", starts_at=NOW)
    alloc.nodes.add(GpuNode.objects.create(name=node, pool=pool, cluster=pool.cluster,
                                           gpu_count=8, gpu_model="H100"))
    return alloc


def _params_in(files: dict[str, str]) -> list[dict]:
    objects = [yaml.safe_load(text) for name, text in files.items()
               if name != "kustomization.yaml"]
    return [m for m in objects if is_guard_params(m)]


def test_the_guards_directory_holds_the_shared_guards_once_and_each_block_its_entry(
        tenant, pools):
    pool = pools[Route.DEDICATED_BLOCK]
    other = TenantFactory(slug="globex", name="Globex")
    one = _block(tenant, pool, "acme-r1", "gpu-a")
    two = _block(other, pool, "globex-r1", "gpu-b")
    objects = cluster_guards(pool.cluster.slug)
    names = [(m["kind"], m["metadata"]["name"]) for m in objects]
    assert len(names) == len(set(names)) == 10  # 4 policies, 4 bindings, the check's pair
    assert not any(is_guard_params(m) for m in objects)
    # The guards name neither block's tenant nor its nodes: nothing in them grows.
    assert not any(word in str(objects) for word in ("gpu-a", "gpu-b", "acme", "globex"))
    assert all(is_guard_check(m) for m in objects[-2:])
    # Each block's directory holds its own entry, and only its own.
    for alloc in (one, two):
        (params,) = _params_in(allocation_files(allocation_manifests(alloc)))
        assert set(params_entries(params)) == {f"check.{alloc.pk}"}
    # Adding a block leaves the shared directory as it was; the last one leaving takes it.
    assert cluster_guards(pool.cluster.slug, excluding=one.pk) == objects
    Allocation.objects.filter(pk=two.pk).update(status="retired")
    assert cluster_guards(pool.cluster.slug, excluding=one.pk) == []


def _bare_repository(root: Path) -> Path:
    """A bare repository with one commit on main (the portal clones and pushes it)."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    bare, seed = root / "platform.git", root / "seed"
    for args, cwd in ((["init", "-q", "--bare", "-b", "main", str(bare)], root),
                      (["init", "-q", "-b", "main", str(seed)], root),
                      (["commit", "-q", "--allow-empty", "-m", "Start"], seed),
                      (["push", "-q", str(bare), "main"], seed)):
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)
    return bare


def test_a_directory_committed_without_its_check_params_is_committed_again(
        tenant, pools, settings, tmp_path):
    """A block committed by the portal before this one (its entry lived in the guards'
    directory) and still waiting for the cluster would never get its own params: following
    it commits its directory again, once, with them."""
    settings.PORTAL_PROVISIONING = "gitops"
    settings.PORTAL_GITOPS_REPO = str(_bare_repository(tmp_path))
    settings.PORTAL_GITOPS_WORKDIR = tmp_path / "work"
    alloc = _block(tenant, pools[Route.DEDICATED_BLOCK], "acme-r1", "gpu-a")
    Allocation.objects.filter(pk=alloc.pk).update(status="provisioning")
    manifests = allocation_manifests(alloc)
    path = gitops.allocation_path(tenant.slug, alloc.namespace, cluster=alloc.pool.cluster.slug)
    old = gitops.directory_files([m for m in manifests if not is_guard_object(m)])
    gitops.Repository().change(path, old, "As the previous portal committed it\n")
    directory = gitops.Repository().dir / path

    def params_files() -> list[str]:
        return [p.name for p in directory.iterdir() if "-guardparams-" in p.name]

    assert params_files() == []
    gitops_progress(alloc.pk, backend=DryRunBackend())
    assert params_files() == [next(n for n in allocation_files(manifests)
                                   if "-guardparams-" in n)]
    assert AuditEvent.objects.filter(subject_id=alloc.pk, action="allocation.committed").exists()
    commits = gitops.Repository().git("rev-list", "--count", "HEAD").stdout
    gitops_progress(alloc.pk, backend=DryRunBackend())  # and only once
    assert gitops.Repository().git("rev-list", "--count", "HEAD").stdout == commits
