"""A worker process discovers the API as it starts (KubernetesBackend.warm): a server that is
away is one error, not one per kind; a kind the server does not serve is only noted."""

import pytest

from fleet.kube import KubeError, KubernetesBackend

pytestmark = pytest.mark.unit


class Resources:
    def __init__(self, served):
        self.served = served

    def get(self, *, api_version, kind):
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        if (api_version, kind) not in self.served:
            raise ResourceNotFoundError(f"{kind} not found")
        return (api_version, kind)

    def invalidate_cache(self):
        pass


def backend_with(client_factory) -> KubernetesBackend:
    backend = KubernetesBackend(api_client=object())
    backend._client_cls = client_factory
    return backend


def test_a_server_away_is_raised_once():
    attempts = []

    def away(api_client):
        attempts.append(1)
        raise ConnectionRefusedError("connection refused")

    backend = backend_with(away)
    with pytest.raises(KubeError) as caught:
        backend.warm([("v1", "Node"), ("v1", "Namespace"), ("v1", "ResourceQuota")])
    assert len(attempts) == 1 and caught.value.retriable


def test_kinds_not_served_are_noted_and_the_rest_discovered():
    class Client:
        def __init__(self, api_client):
            self.resources = Resources({("v1", "Node")})

    backend = backend_with(Client)
    assert backend.warm([("v1", "Node"), ("x.io/v1", "VCluster")]) == ["VCluster"]
    assert backend._resources[("v1", "Node")] == ("v1", "Node")
