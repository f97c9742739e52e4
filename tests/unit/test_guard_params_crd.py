"""The guard check's params are the portal's own kind: the CRD the chart installs is the one
deploy/ ships, and it describes the object the portal renders for each guarded allocation
(group, version, kind, scope, the `spec.entries` map of strings)."""

from pathlib import Path

import pytest
import yaml

from fleet.allocations.admission import (
    PARAMS_API,
    PARAMS_KIND,
    guard_params,
    is_guard_params,
    param_ref,
)
from fleet.kube import LABEL_ALLOCATION

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
    rendered = guard_params(7, {"check.7": "abc"})
    assert "namespace" not in rendered["metadata"] and set(rendered["spec"]) == {"entries"}
    # One object per allocation, named and labelled for it (pruned with its other objects),
    # and selected by the check's binding along with every other allocation's.
    assert rendered["metadata"]["labels"][LABEL_ALLOCATION] == "7" and is_guard_params(rendered)
    assert guard_params(8, {"check.8": "abc"})["metadata"]["name"] != \
        rendered["metadata"]["name"]
    selector = param_ref()["selector"]["matchLabels"]
    assert selector.items() <= rendered["metadata"]["labels"].items()
    assert "name" not in param_ref()
