"""The audit line of an edited request, in the form's words (intake.domain.edit_summary)."""
from hypothesis import given
from hypothesis import strategies as st

from intake.domain import FIELD_WORDS, PROSE_FIELDS, edit_summary
from intake.services import EDITABLE_FIELDS

values = st.text(alphabet="abc 0123456789-", max_size=12)


def test_every_editable_answer_has_a_word():
    assert set(EDITABLE_FIELDS) == set(FIELD_WORDS)


@given(st.dictionaries(st.sampled_from(sorted(FIELD_WORDS)), st.tuples(values, values),
                       min_size=1))
def test_the_line_names_each_change_once_in_words_and_never_a_field_name(changed):
    line = edit_summary(changed)
    assert line.startswith("Changed ") and line.endswith(".")
    for name in changed:
        assert line.count(FIELD_WORDS[name]) >= 1
        if "_" in name:
            assert name not in line
    assert line.count(";") == len(changed) - 1


def test_numbers_show_old_and_new_and_prose_is_not_quoted():
    line = edit_summary({"whole_devices": ("8", "2"),
                         "justification": ("Old words", "New words"),
                         "ends_on": ("2026-12-31", "")})
    assert line == "Changed whole devices 8 → 2; end 2026-12-31 → none; justification rewritten."
    assert "words" not in line
    assert set(PROSE_FIELDS) <= set(FIELD_WORDS)


def test_an_edit_that_changes_nothing_says_so():
    assert edit_summary({}) == "Nothing changed."
