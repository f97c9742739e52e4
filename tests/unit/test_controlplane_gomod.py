"""The consumer go.mod is generated from Kubernetes' own, not typed by hand."""

from tests.harness.controlplane import generate_go_mod, staging_version

UPSTREAM = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/spf13/cobra v1.10.0
\tk8s.io/api v0.0.0
)

require (
\tgo.etcd.io/etcd/server/v3 v3.7.0 // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver
)
"""


def test_staging_tag_follows_the_kubernetes_tag():
    assert staging_version("v1.37.2") == "v0.37.2"


def test_generated_go_mod_requires_kubernetes_and_replaces_staging_with_tags():
    out = generate_go_mod(UPSTREAM, "v1.37.2")
    assert "\tk8s.io/kubernetes v1.37.2" in out
    assert "\tk8s.io/api => k8s.io/api v0.37.2" in out
    assert "\tk8s.io/apiserver => k8s.io/apiserver v0.37.2" in out
    assert "\tgo.etcd.io/etcd/server/v3 v3.7.0" in out
    assert "./staging" not in out
    assert "go 1.26.0" in out
