"""One person's e-mails of a moment as one message: one stays exactly as it was; several are
counted in the subject, each follows under its own subject, and the footer comes once."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenants.tasks import SIGNATURE, combined_mail

pytestmark = pytest.mark.unit
FOOTER = SIGNATURE + "AI Factory Portal. Choose what you hear about: http://x/settings/"
words = st.text(st.characters(codec="utf-8", exclude_characters="\r\n-"), min_size=1,
                max_size=60).map(str.strip).filter(bool)


@given(st.lists(st.tuples(words, words), min_size=1, max_size=12))
def test_every_note_is_in_the_one_message(notes):
    mails = [(subject, body + FOOTER) for subject, body in notes]
    subject, body = combined_mail(mails)
    if len(notes) == 1:
        assert (subject, body) == mails[0]
        return
    assert subject.startswith(f"{len(notes)} updates: ") and len(subject) <= 180
    assert body.count(SIGNATURE) == 1 and body.endswith(FOOTER)
    position = 0
    for title, text in notes:  # in their order, each under its own subject
        position = body.index(f"{title}\n", position) + len(title) + 1
        position = body.index(text, position) + len(text)


def test_a_note_without_a_footer_gets_none():
    subject, body = combined_mail([("a", "one"), ("b", "two")])
    assert subject == "2 updates: a; b" and SIGNATURE not in body
    assert body == "a\n-\none\n\n\nb\n-\ntwo"
