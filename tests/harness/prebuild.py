"""`python -m tests.harness.prebuild`: build the k8s tier's infrastructure in the background
from the start of `make test`, in the order the cluster's tests need it.

On a cold cache the Go builds (control plane, Kueue, kube-scheduler, kwok, the trace
collector, Helm, kube-score, kubectl) are most of the run. Started before pytest, they overlap
the set-up and every test that needs none of them; each fixture that needs a binary waits on
that binary's build lock (tests/harness/procs.build_lock) rather than building it again. On a
warm cache every step is a file check.
"""

from __future__ import annotations

import sys
import time


def steps():
    from . import collector, controlplane, helm, kubescore, kueue, placement

    # The cluster's own tests come first in the k8s tier: then Helm's chart test, then Kueue,
    # then placement (scheduler, kwok, the collector), then the provisioning benchmark.
    return [
        ("kube-apiserver and etcd", controlplane.ensure_binaries),
        ("kube-controller-manager", controlplane.ensure_controller_manager),
        ("helm", helm.ensure_helm),
        ("kube-score", kubescore.ensure_kube_score),
        ("kueue", kueue.ensure_kueue),
        ("kube-scheduler", placement.ensure_scheduler),
        ("kwok", placement.ensure_kwok),
        ("collector", collector.ensure_collector),
        ("kubectl", controlplane.ensure_kubectl),
    ]


def main() -> int:
    started = time.monotonic()
    failed = 0
    for name, build in steps():
        t0 = time.monotonic()
        try:
            build(log=lambda msg: print(f"prebuild: {msg}", flush=True))
        except Exception as exc:  # the fixture that needs it builds again and fails loudly
            failed += 1
            print(f"prebuild: {name} failed: {exc}", flush=True)
            continue
        print(f"prebuild: {name} ready in {time.monotonic() - t0:.0f}s "
              f"({time.monotonic() - started:.0f}s since the start)", flush=True)
    print(f"prebuild: done in {time.monotonic() - started:.0f}s, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
