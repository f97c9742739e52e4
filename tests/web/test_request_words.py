"""Words on the request pages that once read wrong (#46): status labels and the reviewer's
note while the lead edits what was sent back."""
import pytest
from django.urls import reverse

from intake import services
from tests.factories import make_request

pytestmark = pytest.mark.django_db


def test_the_status_filter_names_each_status_in_words(client, lead, tenant, pools):
    make_request(tenant, lead)
    client.force_login(lead)
    page = client.get(reverse("intake:list")).content.decode()
    assert "Changes requested (0)" in page
    assert "Changesrequested" not in page
    assert "Draft (1)" in page


def test_the_lead_sees_the_reviewers_note_while_editing_a_request_sent_back(
        client, lead, admin_user, tenant, pools):
    req = make_request(tenant, lead, submit=True, whole_devices=8)
    services.request_request_changes(request=req, by=admin_user,
                                     reason="Eight is more than the run needs; try four.")
    client.force_login(lead)
    page = client.get(reverse("intake:edit", args=[req.pk])).content.decode()
    assert "The reviewer asked for changes:" in page
    assert "Eight is more than the run needs; try four." in page
    assert admin_user.username in page


def test_a_draft_being_edited_shows_no_reviewers_note(client, lead, tenant, pools):
    req = make_request(tenant, lead)
    client.force_login(lead)
    page = client.get(reverse("intake:edit", args=[req.pk])).content.decode()
    assert "The reviewer asked for changes" not in page


def test_the_route_price_and_fit_are_said_above_the_submit_button(client, lead, tenant, pools):
    # On a phone the preview falls below the form: the decision repeats above Submit.
    from tests.factories import form_data

    client.force_login(lead)
    page = client.post(reverse("intake:preview"), form_data(tenant),
                       headers={"HX-Request": "true"}).content.decode()
    summary = page.index('class="before-submit"')
    assert summary < page.index('value="submit"')
    line = page[summary:page.index("</p>", summary)]
    assert "a month" in line and ("fits now" in line or "fits later" in line
                                  or "does not fit" in line), line
