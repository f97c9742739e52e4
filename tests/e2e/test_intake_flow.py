"""A lead files a request through the form and watches the preview; an admin approves it."""

import re

import pytest
from playwright.sync_api import expect

from intake.models import CapacityRequest

from .conftest import sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_file_preview_and_approve(live_server, page, shot, tenant, lead, admin_user, pools):
    base = live_server.url
    sign_in(page, base, "lead")
    page.goto(f"{base}/requests/new/")
    preview = page.locator("#preview")
    expect(preview).to_contain_text("Not routed yet")

    page.fill("input[name=title]", "Eval harness for release 7")
    page.select_option("select[name=workload_kind]", "evaluation")
    page.check("input[name=isolation_origin][value=habitual]")
    page.check("input[name=device_fill][value=small]")
    page.fill("input[name=replicas]", "7")
    page.select_option("select[name=mig_profile]", "1g.10gb")
    expect(preview.locator(".route-name")).to_have_text("MIG under vCluster")
    expect(preview.locator("td.active")).to_have_text("MIG under vCluster")
    expect(preview).to_contain_text("1,022.00")  # 7 × 1/7 device × 730 h × 1.40
    expect(preview).to_contain_text("Fits now")

    # The reference field appears only for binding origins; the route moves with the answer.
    expect(page.locator("input[name=isolation_reference]")).to_be_hidden()
    page.check("input[name=isolation_origin][value=contractual]")
    expect(page.locator("input[name=isolation_reference]")).to_be_visible()
    expect(preview).to_contain_text("needs evidence")
    page.fill("input[name=isolation_reference]", "MSA-2026-114")
    expect(preview.locator(".route-name")).to_have_text("Confidential pool")
    expect(preview).to_contain_text("(MSA-2026-114)")
    shot(page, "intake-form-confidential")

    page.check("input[name=isolation_origin][value=habitual]")
    expect(preview.locator(".route-name")).to_have_text("MIG under vCluster")
    page.fill("textarea[name=justification]", "Nightly evaluation of release candidates.")
    page.click("button[name=intent][value=submit]")
    expect(page.locator(".messages")).to_contain_text("submitted for review")
    req = CapacityRequest.objects.get()
    assert req.status == "submitted" and req.route == "mig_vcluster"

    page.click("text=Sign out")
    sign_in(page, base, "padmin")
    page.goto(f"{base}/review/")
    expect(page.locator("#rows")).to_contain_text("Eval harness for release 7")
    page.click("text=Eval harness for release 7")
    expect(page.locator(".route-name").first).to_contain_text("MIG under vCluster")
    # The dry-run of every object loads into the review page by itself.
    expect(page.locator("#objects")).to_contain_text("ResourceClaimTemplate")
    expect(page.locator("#objects")).to_contain_text("object(s) accepted")
    shot(page, "review-page")
    page.check("input[name=action][value=approve]")
    page.fill("textarea[name=reason]", "Fits the MIG pool.")
    page.click("text=Record decision")
    # Next in queue: nothing else waits, so the queue opens and says what was recorded.
    expect(page.locator(".messages")).to_contain_text("Nothing else waits in this queue.")
    page.locator(".messages").get_by_role("link", name=f"#{req.pk}").click()
    # Tasks run eagerly here against the dry-run backend: provisioning finishes at once.
    expect(page.locator("h1 .status")).to_have_text(re.compile("Active"))
    expect(page.locator(".timeline")).to_contain_text("Fits the MIG pool.")
    allocation = page.locator("#allocation")
    expect(allocation).to_contain_text(re.compile(r"(\d+) of \1 object\(s\) applied"))
    shot(page, "approved-and-provisioned")
    # The actions' buttons sit on one line: a confirm step's button ("Release now…") is as
    # high as the plain ones beside it (a summary's margin once moved it 5 px up).
    boxes = page.evaluate("""() => [...document.querySelectorAll(
        '#allocation .actions > a.button, #allocation .actions > form .button,'
        + ' #allocation .actions > details > summary')].map(b => {
            const r = b.getBoundingClientRect(); return [b.textContent.trim(), r.top, r.bottom];
        })""")
    assert any(label.startswith("Release") for label, _, _ in boxes), boxes
    assert {round(top) for _, top, _ in boxes} == {round(boxes[0][1])}, boxes
    assert {round(bottom) for _, _, bottom in boxes} == {round(boxes[0][2])}, boxes
    # Each question opens on screen, whatever the width (anchored to the button's right,
    # "Release now…" once opened 5–40 px past the left edge).
    for width in (1280, 1024, 700, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for label in ("Release now…", "Resize…"):
            summary = page.locator("#allocation summary", has_text=label)
            summary.click()
            panel = page.locator("#allocation details[open] > form")
            box = panel.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, (width, label, box)
            summary.click()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.click("text=Kubernetes objects")
    expect(page.locator("h1")).to_have_text("Kubernetes objects")
    expect(page.locator("details.manifest").first).to_contain_text("Namespace")
    page.click("text=ResourceClaimTemplate")
    expect(page.locator("details[open] pre")).to_contain_text("1g.10gb")
    shot(page, "manifests")
    req.refresh_from_db()
    assert req.status == "active" and req.allocation.mig_count == 7


def test_the_lead_downloads_what_runs_the_first_job(live_server, page, shot, tenant, lead,
                                                    admin_user, pools, tmp_path):
    """After approval the lead opens the allocation and downloads the kubeconfig and the
    example; the example is exactly what the k8s tier applies as the tenant
    (fleet.allocations.connect.example_workload for this allocation)."""
    import yaml
    from django.conf import settings

    from fleet.allocations.connect import example_workload
    from fleet.allocations.desired import allocation_spec
    from intake import services
    from tests.factories import make_request

    req = make_request(tenant, lead, submit=True, whole_devices=2)
    services.request_approve(request=req, by=admin_user, reason="ok")  # eager: provisioned
    req.refresh_from_db()
    base = live_server.url
    sign_in(page, base, "lead")
    page.goto(f"{base}/requests/{req.pk}/")
    section = page.locator("#connect")
    expect(section).to_contain_text("LocalQueue gpu")
    shot(page, "use-it")
    files = {}
    for label in ("Download kubeconfig", "Download example.yaml"):
        with page.expect_download() as download:
            section.get_by_text(label).click()
        path = tmp_path / download.value.suggested_filename
        download.value.save_as(path)
        files[label] = yaml.safe_load(path.read_text())
    assert files["Download kubeconfig"]["current-context"] == req.allocation.namespace
    assert files["Download example.yaml"] == example_workload(
        allocation_spec(req.allocation), image=settings.PORTAL_EXAMPLE_IMAGE)
