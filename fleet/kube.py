"""The portal's Kubernetes adapter: server-side apply, dry-run, list-by-label and prune.

Two backends share one interface: `KubernetesBackend` talks to a real API server through the
official client, `DryRunBackend` (the embedded default) records what it would apply. Every
failure is a `KubeError` that says whether a retry can help, with the server's message kept
for the user.

Long on purpose: both backends behind one interface in one module, so the dry-run record
cannot drift from what the real backend does (apply, list, watch, prune, errors).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import urllib3
import yaml
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError

from .vocabulary import (  # noqa: F401 - re-read by callers of the adapter
    HOME_CLUSTER,
    LABEL_ALLOCATION,
    LABEL_ROUTE,
    LABEL_TENANT,
    MANAGED_BY,
    MANAGER,
    ClusterConnections,
)

# Status codes where the same call may succeed later.
RETRIABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class KubeError(Exception):
    def __init__(self, message: str, *, retriable: bool, status: int | None = None,
                 reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.retriable = retriable
        self.status = status
        self.reason = reason

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, order=True)
class ObjectKey:
    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> ObjectKey:
        meta = manifest.get("metadata", {})
        return cls(manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""),
                   meta["name"])

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


class KubeBackend(Protocol):
    field_manager: str
    # Whether the server runs admission (policies refuse objects): a real API server does,
    # the dry-run record does not.
    enforces_admission: bool

    def apply(self, manifest: dict, *, dry_run: bool = False, force: bool = False,
              field_manager: str = "") -> dict:
        """Server-side apply, as `field_manager` when given (else the backend's own)."""
        ...

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict | None:
        ...

    def list(self, api_version: str, kind: str, *, label_selector: str = "",
             namespace: str = "") -> list[dict]: ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool: ...

    def was_deleted(self, key: ObjectKey) -> bool:
        """Whether an object found missing is known to have been deleted (not only never
        recorded)."""
        ...

    def get_path(self, path: str) -> dict | None: ...

    def list_path(self, path: str, *, label_selector: str = "", page: int = 500,
                  field_selector: str = "") -> list[dict]: ...


def _error_from_api(exc: Exception, what: str) -> KubeError:
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    message, reason = "", ""
    if body:
        try:
            data = json.loads(body if isinstance(body, str | bytes) else json.dumps(body))
            message, reason = data.get("message", ""), data.get("reason", "")
        except (ValueError, TypeError, AttributeError):
            message = str(body)[:2000]
    if not message:
        message = f"{exc.__class__.__name__}: {getattr(exc, 'reason', '') or exc}"
    retriable = status is None or status in RETRIABLE_STATUS
    return KubeError(f"{what}: {message}", retriable=retriable, status=status, reason=reason)


class KubernetesBackend:
    """A real API server through the official client's dynamic API."""

    enforces_admission = True

    def __init__(self, api_client, *, field_manager: str = MANAGER,
                 request_timeout: float = 20) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self.timeout = request_timeout
        self._client = None
        self._client_cls = DynamicClient
        self._lock = threading.Lock()
        # The client's discovery cache is not thread-safe: clearing it while another thread
        # reads it raised KeyError('resources') under the parallel apply. Every discovery
        # read and refresh goes through this lock, and found resources are kept here.
        self._discovery_lock = threading.RLock()
        self._resources: dict[tuple[str, str], Any] = {}

    @property
    def server(self) -> str:
        """The API server this backend talks to, as its client was configured."""
        return self.api_client.configuration.host.rstrip("/")

    @classmethod
    def from_kubeconfig(cls, path: str, **kw) -> KubernetesBackend:
        return cls(config.new_client_from_config(config_file=path), **kw)

    @classmethod
    def in_cluster(cls, **kw) -> KubernetesBackend:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration), **kw)

    # -- plumbing

    def _dynamic(self):
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._client_cls(self.api_client)
                except Exception as exc:  # discovery failed: server down or refused us
                    raise _error_from_api(exc, "Kubernetes API discovery failed") from exc
            return self._client

    def warm(self, kinds) -> list[str]:
        """Discover the API and the given (apiVersion, kind) pairs now, so the first real
        call does not pay for it (a worker process does this as it starts). What the server
        does not serve is left for that call to report; returns those kinds' names."""
        self._dynamic()  # the server away: raised once, not once per kind
        missing = []
        for api_version, kind in kinds:
            try:
                self._resource(api_version, kind)
            except KubeError as exc:
                if exc.reason != "NotFound":
                    raise  # not "not served" but trouble: the first task reports it
                missing.append(kind)
        return missing

    def _resource(self, api_version: str, kind: str):
        found = self._resources.get((api_version, kind))
        if found is not None:
            return found
        client = self._dynamic()
        with self._discovery_lock:
            found = self._resources.get((api_version, kind))
            if found is None:
                found = self._discover(client, api_version, kind)
                self._resources[(api_version, kind)] = found
            return found

    def _discover(self, client, api_version: str, kind: str):
        """Under the discovery lock. Any failure of discovery itself (the server away, or
        the client library tripping over a half-refreshed cache) is a KubeError that says
        whether a retry can help, never a bare exception that would leave a task hanging."""
        try:
            try:
                return client.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                # New CRDs appear after discovery was cached: look once more.
                client.resources.invalidate_cache()
                return client.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as exc:
            raise KubeError(f"The API server does not serve {kind} in {api_version} "
                            "(is its CRD installed?)", retriable=False,
                            reason="NotFound") from exc
        except KubeError:
            raise
        except Exception as exc:
            err = _error_from_api(exc, f"Kubernetes API discovery of {kind} in {api_version}")
            err.retriable = True
            raise err from exc

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except (ApiException, DynamicApiError) as exc:
            err = _error_from_api(exc, what)
            if err.status in (401, 403) and not self._server_ready():
                # A starting API server refuses requests until its authorizer has synced:
                # that refusal is not the final word.
                err.retriable = True
                err.message += " (the API server was not ready yet)"
            raise err from exc
        except KubeError:
            raise
        except Exception as exc:  # connection refused, TLS, timeouts: the network's doing
            raise KubeError(f"{what}: cannot reach the Kubernetes API "
                            f"({exc.__class__.__name__}: {exc})", retriable=True) from exc

    def _server_ready(self) -> bool:
        try:
            response = self.api_client.call_api(
                "/readyz", "GET", auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=5)
            return getattr(response, "status", None) == 200
        except Exception:  # not answering is not ready
            return False

    # -- operations

    def apply(self, manifest: dict, *, dry_run: bool = False, force: bool = False,
              field_manager: str = "") -> dict:
        """Server-side apply. Sent and read as plain JSON: the dynamic client's deep copies and
        object conversion of body and answer cost more CPU than the request itself (a
        provisioning worker applies ~17 objects per allocation)."""
        key = ObjectKey.of(manifest)
        resource = self._resource(key.api_version, key.kind)
        if resource.namespaced and not key.namespace:
            raise KubeError(f"Applying {key}: a {key.kind} needs a namespace",
                            retriable=False)
        query = [("fieldManager", field_manager or self.field_manager)]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        response = self._call(
            f"Applying {key}", self.api_client.call_api,
            resource.path(name=key.name, namespace=key.namespace or None), "PATCH",
            query_params=query, body=manifest,
            header_params={"Accept": "application/json",
                           "Content-Type": "application/apply-patch+yaml"},
            auth_settings=["BearerToken"], _preload_content=False,
            _return_http_data_only=True)
        try:
            return json.loads(response.data)
        except ValueError as exc:
            raise KubeError(f"Applying {key}: the answer is not JSON", retriable=True) from exc

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict | None:
        resource = self._resource(api_version, kind)
        try:
            return self._call(f"Reading {kind} {name}", self._dynamic().get, resource,
                              name=name, namespace=namespace or None).to_dict()
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, *, label_selector: str = "",
             namespace: str = "") -> list[dict]:
        resource = self._resource(api_version, kind)
        result = self._call(f"Listing {kind}", self._dynamic().get, resource,
                            namespace=namespace or None, label_selector=label_selector or None)
        return list(result.to_dict().get("items", []))

    def list_path(self, path: str, *, label_selector: str = "", page: int = 500,
                  field_selector: str = "") -> list[dict]:
        """Every item of a collection path, fetched in pages of `page` (each answer bounded)
        and parsed straight from JSON: the dynamic client's object conversion costs about a
        millisecond per object, which is seconds at thousands of Workloads."""
        return self.list_path_versioned(path, label_selector=label_selector, page=page,
                                        field_selector=field_selector)[0]

    def list_path_versioned(self, path: str, *, label_selector: str = "", page: int = 500,
                            field_selector: str = "") -> tuple[list[dict], str]:
        """list_path and the collection's resourceVersion (where a watch resumes)."""
        items: list[dict] = []
        token = ""
        while True:
            query = [("limit", str(page))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            response = self._call(f"Listing {path}", self.api_client.call_api, path, "GET",
                                  query_params=query,
                                  header_params={"Accept": "application/json"},
                                  auth_settings=["BearerToken"], _preload_content=False,
                                  _return_http_data_only=True)
            try:
                data = json.loads(response.data)
            except ValueError as exc:
                raise KubeError(f"Listing {path}: the answer is not JSON",
                                retriable=True) from exc
            items.extend(data.get("items") or [])
            meta = data.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return items, meta.get("resourceVersion", "")

    def watch_path(self, path: str, *, resource_version: str, label_selector: str = "",
                   timeout_seconds: int = 300):
        """Events of a collection from `resource_version` on ({"type", "object"} dicts,
        bookmarks included), until the server ends the watch after `timeout_seconds`."""
        query = [("watch", "1"), ("resourceVersion", resource_version),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        try:
            response = self.api_client.call_api(
                path, "GET", query_params=query, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=(self.timeout, timeout_seconds + 30))
        except Exception as exc:
            raise _error_from_api(exc, f"Watching {path}") from exc
        try:
            buffer = b""
            for chunk in response.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (OSError, ValueError, urllib3.exceptions.HTTPError) as exc:
            # e.g. "Response ended prematurely" when the server closes a chunked stream
            raise KubeError(f"Watching {path}: {exc.__class__.__name__}: {exc}",
                            retriable=True) from exc
        finally:
            response.release_conn()

    def get_path(self, path: str) -> dict | None:
        """A raw GET of an API path, e.g. of an aggregated API such as Kueue's visibility
        server; None when the path is not served (404) or its backend is away (503)."""
        try:
            response = self._call(f"Reading {path}", self.api_client.call_api, path, "GET",
                                  header_params={"Accept": "application/json"},
                                  auth_settings=["BearerToken"], _preload_content=False,
                                  _return_http_data_only=True)
        except KubeError as exc:
            if exc.status in (404, 503):
                return None
            raise
        try:
            return json.loads(response.data)
        except ValueError as exc:
            raise KubeError(f"Reading {path}: the answer is not JSON", retriable=True) from exc

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        resource = self._resource(api_version, kind)
        try:
            self._call(f"Deleting {kind} {name}", self._dynamic().delete, resource, name=name,
                       namespace=namespace or None, propagation_policy="Background")
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    def was_deleted(self, key: ObjectKey) -> bool:
        return True  # the API server's store is the truth: missing there is deleted


@dataclass
class DryRunBackend:
    """The embedded default: records what it would apply and answers from that record."""

    field_manager: str = MANAGER
    enforces_admission = False
    objects: dict[ObjectKey, dict] = field(default_factory=dict)
    log: list[tuple[str, ObjectKey]] = field(default_factory=list)
    deleted: set[ObjectKey] = field(default_factory=set)

    def apply(self, manifest: dict, *, dry_run: bool = False, force: bool = False,
              field_manager: str = "") -> dict:
        key = ObjectKey.of(manifest)
        stored = copy.deepcopy(manifest)
        stored.setdefault("metadata", {}).setdefault("managedFields", [
            {"manager": field_manager or self.field_manager, "operation": "Apply"}])
        if not dry_run:
            self.objects[key] = stored
            self.deleted.discard(key)
            self.log.append(("apply", key))
        return stored

    def was_deleted(self, key: ObjectKey) -> bool:
        # The record is this process's only (a restart empties it): an object it lacks was
        # deleted only if it saw the delete; otherwise it was merely not recorded here.
        return key in self.deleted

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict | None:
        found = self.objects.get(ObjectKey(api_version, kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(self, api_version: str, kind: str, *, label_selector: str = "",
             namespace: str = "") -> list[dict]:
        wanted = dict(part.split("=", 1) for part in label_selector.split(",") if "=" in part)
        out = []
        for key, obj in self.objects.items():
            labels = obj.get("metadata", {}).get("labels", {})
            if (key.api_version, key.kind) == (api_version, kind) and \
                    (not namespace or key.namespace == namespace) and \
                    all(labels.get(k) == v for k, v in wanted.items()):
                out.append(copy.deepcopy(obj))
        return out

    def get_path(self, path: str) -> dict | None:
        return None  # nothing is served behind a dry run

    def list_path(self, path: str, *, label_selector: str = "", page: int = 500,
                  field_selector: str = "") -> list[dict]:
        return []

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> bool:
        key = ObjectKey(api_version, kind, namespace, name)
        self.log.append(("delete", key))
        self.deleted.add(key)
        return self.objects.pop(key, None) is not None


def prune(backend: KubeBackend, *, label_selector: str, kinds: Iterable[tuple[str, str]],
          keep: Iterable[ObjectKey] = ()) -> list[ObjectKey]:
    """Delete every labelled object of these kinds that is not in `keep`; return them.

    Namespaces go last, so their contents are deleted by name (and reported) first.
    """
    keep_set = set(keep)
    ordered = sorted(kinds, key=lambda k: k[1] == "Namespace")
    deleted: list[ObjectKey] = []
    for api_version, kind in ordered:
        for obj in backend.list(api_version, kind, label_selector=label_selector):
            key = ObjectKey.of({**obj, "apiVersion": api_version, "kind": kind})
            if key not in keep_set and backend.delete(api_version, kind, key.name,
                                                      key.namespace):
                deleted.append(key)
    return deleted


@dataclass(frozen=True)
class ClusterConnection:
    """How to reach one cluster, as plain data (fleet.inventory.clusters builds it from the
    registry): the portal's own setting, a kubeconfig (a file, or a Secret's text the caller
    reads), or a dry run. Never the credential itself."""

    cluster: str  # the cluster's slug: one backend per cluster and process
    kind: str  # one of vocabulary.ClusterConnections
    kubeconfig_file: str = ""
    kubeconfig_secret: str = ""  # namespace/name#key, read through `load_kubeconfig`
    api_server: str = ""  # what the kubeconfig must point at; blank: whatever it says


_backends: dict[str, tuple[ClusterConnection | None, KubeBackend]] = {}
_backend_lock = threading.Lock()


def _configured_backend() -> KubeBackend:
    kind = settings.PORTAL_KUBE_BACKEND
    if kind == "kubeconfig":
        return KubernetesBackend.from_kubeconfig(settings.PORTAL_KUBECONFIG,
                                                 field_manager=settings.PORTAL_FIELD_MANAGER)
    if kind == "in-cluster":
        return KubernetesBackend.in_cluster(field_manager=settings.PORTAL_FIELD_MANAGER)
    return DryRunBackend(field_manager=settings.PORTAL_FIELD_MANAGER)


def _connect(conn: ClusterConnection, load_kubeconfig) -> KubeBackend:
    manager = settings.PORTAL_FIELD_MANAGER
    if conn.kind == ClusterConnections.CONFIGURED:
        return _configured_backend()
    if conn.kind == ClusterConnections.DRY_RUN:
        return DryRunBackend(field_manager=manager)
    try:
        if conn.kubeconfig_file:
            api_client = config.new_client_from_config(config_file=conn.kubeconfig_file)
        else:
            text = load_kubeconfig() if load_kubeconfig else ""
            api_client = config.new_client_from_config_dict(yaml.safe_load(text or "") or {})
    except KubeError:
        raise
    except Exception as exc:  # a missing file, a Secret without the key, a broken kubeconfig
        raise KubeError(f"Cluster {conn.cluster}: its kubeconfig cannot be used: {exc}",
                        retriable=False) from exc
    backend = KubernetesBackend(api_client, field_manager=manager)
    if conn.api_server and backend.server != conn.api_server.rstrip("/"):
        raise KubeError(f"Cluster {conn.cluster}: its kubeconfig points at {backend.server}, "
                        f"not at the registered API server {conn.api_server}.",
                        retriable=False)
    return backend


def backend_for(conn: ClusterConnection, *, load_kubeconfig=None) -> KubeBackend:
    """The backend of one cluster, built once per process and again when its connection
    changes (an admin pointed the cluster at another credential)."""
    with _backend_lock:
        found = _backends.get(conn.cluster)
        if found is not None and (found[0] is None or found[0] == conn):
            return found[1]  # None: set by set_backend, whatever the registry says
    backend = _connect(conn, load_kubeconfig)
    with _backend_lock:
        found = _backends.get(conn.cluster)
        if found is not None and (found[0] is None or found[0] == conn):
            return found[1]
        _backends[conn.cluster] = (conn, backend)
        return backend


def set_backend(backend: KubeBackend | None, *, cluster: str = HOME_CLUSTER) -> None:
    """Pin one cluster's backend (tests point it at their API server); None forgets it."""
    with _backend_lock:
        if backend is None:
            _backends.pop(cluster, None)
        else:
            _backends[cluster] = (None, backend)


def forget_backends() -> None:
    """Every cluster connects afresh on next use (tests, after changing settings)."""
    with _backend_lock:
        _backends.clear()


@contextmanager
def using_backend(backend: KubeBackend, *, cluster: str = HOME_CLUSTER
                  ) -> Iterator[KubeBackend]:
    """One cluster's backend is `backend` inside the block, the previous one after (the demo
    seeding provisions its history on its own dry run, whatever is configured)."""
    with _backend_lock:
        previous = _backends.get(cluster)
        _backends[cluster] = (None, backend)
    try:
        yield backend
    finally:
        with _backend_lock:
            if previous is None:
                _backends.pop(cluster, None)
            else:
                _backends[cluster] = previous
