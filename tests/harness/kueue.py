"""The real Kueue controller for the k8s tier: built from the Go module proxy, cached by
version, and run against the test API server with its webhooks served on loopback.

What it takes (conversion and admission webhooks rewritten to loopback URLs, internal cert
management off, metrics off) follows what envtest does for controllers outside a cluster.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from .procs import CACHE_ROOT, ManagedProcess, built_once, free_port, wait_http_ok

KUEUE_VERSION = os.environ.get("PORTAL_TEST_KUEUE_VERSION", "v0.17.0")
KUEUE_MODULE = "sigs.k8s.io/kueue"
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")


def kueue_dir(version: str = KUEUE_VERSION) -> Path:
    return CACHE_ROOT / "kueue" / version


def ensure_kueue(version: str = KUEUE_VERSION, log=print) -> Path:
    """Build the kueue manager once per version (a long cold build, then cached)."""
    root = kueue_dir(version)
    return built_once(root, root / "bin" / "kueue", lambda: _build_kueue(version, root, log))


def _build_kueue(version: str, root: Path, log) -> None:
    if not shutil.which("go"):
        raise RuntimeError("Go toolchain not found: the k8s tier builds Kueue with it")
    started = time.monotonic()
    (root / "bin").mkdir(parents=True, exist_ok=True)
    # The visibility server's certificates go to a package variable's directory (default
    # /visibility): point it into the cache so nothing is written outside it.
    certs = root / "visibility-certs"
    certs.mkdir(exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false",
           "GOBIN": str(root / "bin")}
    ldflags = (f"-s -w -X {KUEUE_MODULE}/pkg/version.GitVersion={version} "
               f"-X {KUEUE_MODULE}/pkg/visibility.certDir={certs}")
    log(f"kueue: building {version} (cold: several minutes)")
    subprocess.run(["go", "install", "-trimpath", "-ldflags", ldflags,
                    f"{KUEUE_MODULE}/cmd/kueue@{version}"], check=True, env=env, cwd="/")
    (root / "build-seconds.txt").write_text(f"{time.monotonic() - started:.0f}\n")
    log(f"kueue: built in {time.monotonic() - started:.0f}s")


def module_root(version: str = KUEUE_VERSION) -> Path:
    out = subprocess.run(["go", "mod", "download", "-json", f"{KUEUE_MODULE}@{version}"],
                         capture_output=True, text=True, check=True, cwd="/",
                         env={**os.environ, "GOFLAGS": "-mod=mod"})
    return Path(json.loads(out.stdout)["Dir"])


def kueue_crds(ca_pem: bytes, webhook_port: int, version: str = KUEUE_VERSION) -> list[dict]:
    """Every Kueue CRD; those with several versions convert through the local webhook."""
    import base64

    import yaml  # here, not at the top: prebuild runs before the venv

    bundle = base64.b64encode(ca_pem).decode()
    docs = []
    for path in sorted((module_root(version) / "config/components/crd/bases").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc["spec"]["names"]["plural"] in CONVERTED:
                doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": f"https://127.0.0.1:{webhook_port}/convert",
                                     "caBundle": bundle}}}
            docs.append(doc)
    return docs


def kueue_webhooks(ca_pem: bytes, webhook_port: int, version: str = KUEUE_VERSION
                   ) -> list[dict]:
    """Kueue's admission webhooks, pointed at loopback, keeping only the paths the enabled
    integrations serve (a registered path nobody serves, with failurePolicy Fail, would block
    every matching request)."""
    import base64

    import yaml  # here, not at the top: prebuild runs before the venv

    bundle = base64.b64encode(ca_pem).decode()
    path = module_root(version) / "config/components/webhook/manifests.yaml"
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        kept = []
        for hook in doc.get("webhooks", []):
            svc_path = hook["clientConfig"]["service"]["path"]
            if not any(part in svc_path for part in ("kueue-x-k8s-io", "batch-v1-job")):
                continue
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{svc_path}",
                                    "caBundle": bundle}
            kept.append(hook)
        doc["webhooks"] = kept
        doc["metadata"] = {"name": doc["metadata"]["name"]}
        if kept:
            out.append(doc)
    return out


VISIBILITY_SERVICE = "kueue-visibility-server"


def machine_ip() -> str:
    """A non-loopback address of this machine: the API server refuses loopback endpoints,
    and the visibility server must be reached through one."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    for addr in out:
        if "." in addr and not addr.startswith("127."):
            return addr
    raise RuntimeError("no non-loopback IPv4 address (hostname -I): the visibility API "
                       "needs one to be registered")


def visibility_registration(ca_pem: bytes, address: str, port: int) -> list[dict]:
    """The objects that make the API server route /apis/visibility.kueue.x-k8s.io to Kueue's
    visibility server: a selector-less Service, its EndpointSlice and the APIService."""
    import base64

    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": VISIBILITY_SERVICE, "namespace": "kueue-system"},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{VISIBILITY_SERVICE}-local", "namespace": "kueue-system",
                      "labels": {"kubernetes.io/service-name": VISIBILITY_SERVICE}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
         "ports": [{"name": "https", "port": port, "protocol": "TCP"}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": "v1beta2.visibility.kueue.x-k8s.io"},
         "spec": {"group": "visibility.kueue.x-k8s.io", "version": "v1beta2",
                  "groupPriorityMinimum": 100, "versionPriority": 100,
                  "caBundle": base64.b64encode(ca_pem).decode(),
                  "service": {"namespace": "kueue-system", "name": VISIBILITY_SERVICE,
                              "port": 443}}},
    ]


def kueue_client_connection() -> dict:
    """`clientConnection` for the tier's Kueue: QPS/burst as `PORTAL_TEST_KUEUE_QPS` says
    ("200/400" unless set; "kueue" for Kueue's own defaults, none written)."""
    text = os.environ.get("PORTAL_TEST_KUEUE_QPS", "200/400")
    if text == "kueue":
        return {}
    qps, burst = (int(n) for n in text.split("/"))
    return {"clientConnection": {"qps": qps, "burst": burst}}


def kueue_config(*, webhook_port: int, health_port: int, visibility_port: int, cert_dir: Path,
                 device_class_mappings: list[dict], visibility_address: str,
                 multikueue: dict | None = None) -> dict:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": False},
        # Raised as for the tier's scheduler (Kueue's default is 20/30): its calls to its own
        # API server are not what most tests measure. PORTAL_TEST_KUEUE_QPS=kueue keeps
        # Kueue's defaults (the provisioning benchmark's first Jobs wait on them at 100
        # allocations). MultiKueue's clients to the workers keep client-go's defaults (5/10)
        # in v0.17: not configurable there.
        **kueue_client_connection(),
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # Off: with internal cert management off its server wants certs from a fixed /etc path.
        # The portal reads Kueue's state from the API server, not from these metrics.
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        # Registered as an APIService; reached by the API server at a non-loopback address.
        "visibilityServer": {"bindAddress": visibility_address, "bindPort": visibility_port},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"DynamicResourceAllocation": True},
        "resources": {"deviceClassMappings": device_class_mappings},
    }
    if multikueue is not None:  # a MultiKueue manager: how it follows its workers
        config["multiKueue"] = multikueue
    return config


class KueueController:
    """One kueue manager process for a test session."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.visibility_port = free_port()
        self.visibility_address = machine_ip()
        self._proc: ManagedProcess | None = None
        self.startup_seconds = 0.0

    def start(self, binary: Path, *, admin_kubeconfig: Path, cert_dir: Path,
              device_class_mappings: list[dict], multikueue: dict | None = None
              ) -> KueueController:
        import yaml  # here, not at the top: prebuild runs before the venv

        started = time.monotonic()
        config = self.workdir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(kueue_config(
            webhook_port=self.webhook_port, health_port=self.health_port,
            visibility_port=self.visibility_port, cert_dir=cert_dir,
            device_class_mappings=device_class_mappings,
            visibility_address=self.visibility_address, multikueue=multikueue)))
        argv = [str(binary), f"--config={config}", f"--kubeconfig={admin_kubeconfig}",
                "--zap-log-level=info"]
        self._proc = ManagedProcess("kueue", self._private_etc(argv, cert_dir),
                                    log_path=self.workdir / "kueue.log").start()
        wait_http_ok(self._proc, f"http://127.0.0.1:{self.health_port}/readyz", timeout=90,
                     what="kueue /readyz")
        self.startup_seconds = time.monotonic() - started
        return self

    def _private_etc(self, argv: list[str], cert_dir: Path) -> list[str]:
        """Kueue reads its metrics certificate from a fixed /etc/kueue/metrics/certs when its
        own cert management is off. Give it that path in a private mount namespace (an
        overlay on /etc seen by this process alone), never in the machine's /etc. The
        visibility server's certificate directory is fixed at build time and shared by every
        instance of the build: each process sees its own there, bind-mounted in the same
        private namespace (several clusters' Kueues run from one build)."""
        if os.geteuid() != 0 or not shutil.which("unshare"):
            raise RuntimeError("the Kueue tier needs root and unshare(1) for a private /etc "
                               "overlay (Kueue reads /etc/kueue/metrics/certs)")
        upper, work = self.workdir / "etc-upper", self.workdir / "etc-work"
        certs = upper / "kueue" / "metrics" / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        work.mkdir(exist_ok=True)
        visibility = kueue_dir() / "visibility-certs"  # set at build time (see ensure_kueue)
        visibility.mkdir(parents=True, exist_ok=True)
        own = self.workdir / "visibility-certs"
        own.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(cert_dir / name, certs / name)
            shutil.copy(cert_dir / name, own / name)
        script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} "
                  f"/etc && mount --bind {own} {visibility} && exec \"$@\"")
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "kueue",
                *argv]

    def raise_if_dead(self) -> None:
        if self._proc is not None:
            self._proc.raise_if_dead()

    def log_tail(self, lines: int = 40) -> str:
        path = self.workdir / "kueue.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None
