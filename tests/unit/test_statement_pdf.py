"""The statement PDF read back, with a Unicode font and without one (the fallback prints what
Latin-1 cannot as "?" instead of failing the download)."""

import datetime as dt
import io
from decimal import Decimal
from types import SimpleNamespace

import pytest
from pypdf import PdfReader

from billing.exports import StatementDocument, statement_csv, statement_pdf

pytestmark = pytest.mark.unit


def _doc(name: str, closed: bool = False) -> StatementDocument:
    line = SimpleNamespace(description="acme-r1 · H100 shared", policy="billed on allocated",
                           route="shared_pool", allocated_h=Decimal("10"), used_h=Decimal("4"),
                           idle_h=Decimal("6"), credit_h=Decimal("0"), charged_h=Decimal("10"),
                           amount=Decimal("25.00"))
    figures = SimpleNamespace(allocated_h=Decimal("10"), used_h=Decimal("4"),
                              idle_h=Decimal("6"), credit_h=Decimal("0"),
                              charged_h=Decimal("10"), usage_amount=Decimal("25.00"),
                              final=Decimal("1234.50"))
    return StatementDocument("acme", name, "CC-1", dt.date(2026, 10, 1), closed, [line],
                             [(Decimal("1209.50"), "Late DCGM data", dt.datetime(2026, 11, 2),
                               "adjustment"),
                              (Decimal("-50.00"), "Goodwill", dt.datetime(2026, 11, 2),
                               "adjustment"),
                              (Decimal("50.00"), "Withdrawal of the EUR -50.00 adjustment "
                               "(Goodwill): entered twice", dt.datetime(2026, 11, 3),
                               "withdrawal")],
                             figures, "USD", "AI Factory")


def _text(pdf: bytes) -> str:
    return " ".join(" ".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages)
                    .split())


@pytest.mark.parametrize("font", ["", "/nonexistent.ttf"])
def test_the_pdf_says_what_the_csv_says(settings, font):
    settings.PORTAL_PDF_FONT = font
    doc = _doc("Acme Øresund 株式会社")
    text = _text(statement_pdf(doc))
    assert "October 2026" in text and "open" in text and "Late DCGM data" in text
    # an open month's total is not called final (issue #46: it said "Final")
    assert "So far (open month, not final): USD 1,234.50" in text and "25.00" in text
    assert "Final:" not in text
    if font:  # no such file: the core font, and the name survives as far as Latin-1 goes
        assert "Acme Øresund ????" in text
    else:  # DejaVu (installed by the test command) has no CJK glyphs; Latin ones print
        assert "Acme Øresund" in text
    assert "Withdrawal of the EUR -50.00 adjustment (Goodwill): entered twice" in text
    rows = statement_csv(doc).splitlines()
    # the CSV's bottom line says what the PDF's says (an open month's is not final)
    assert rows[-1].endswith('final,"So far (open month, not final)",,,,,,,,1234.50,USD')
    assert ",Final," not in rows[-1]
    assert [r.split(",")[4] for r in rows[-4:-1]] == ["adjustment", "adjustment",
                                                      "withdrawal"]


def test_a_closed_months_pdf_gives_its_final():
    text = _text(statement_pdf(_doc("Acme", closed=True)))
    assert "Final: USD 1,234.50" in text and "So far" not in text
    assert statement_csv(_doc("Acme", closed=True)).splitlines()[-1].endswith(
        "final,Final,,,,,,,,1234.50,USD")
