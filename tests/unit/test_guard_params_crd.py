"""The shared guards' params are the portal's own kind: the CRD the chart installs is the one
deploy/ ships, and it describes the object the portal renders (group, version, kind, scope,
the `spec.entries` map of strings)."""

from pathlib import Path

import pytest
import yaml

from fleet.allocations.admission import GUARD_PARAMS, PARAMS_API, PARAMS_KIND, guard_params

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_the_chart_installs_the_crd_deploy_ships():
    plain = (ROOT / "deploy" / "crds" / "guardparams.yaml").read_text()
    assert (ROOT / "deploy" / "helm" / "aifactory-portal" / "crds" /
            "guardparams.yaml").read_text() == plain


def test_the_crd_describes_what_the_portal_renders():
    crd = yaml.safe_load((ROOT / "deploy" / "crds" / "guardparams.yaml").read_text())
    group, version = PARAMS_API.split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == PARAMS_KIND
    assert crd["spec"]["scope"] == "Cluster"
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    entries = served["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["entries"]
    assert entries["additionalProperties"]["type"] == "string"
    rendered = guard_params({"node.gpu-a": "acme"})
    assert rendered["metadata"]["name"] == GUARD_PARAMS and "namespace" not in rendered["metadata"]
    assert set(rendered["spec"]) == {"entries"}
    assert "spec" not in guard_params({})  # an empty map would reach the server as null
