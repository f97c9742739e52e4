"""A statement as finance sends it: one document (lines, total, adjustments, final, in the
statement's own numbers from billing.figures), written as CSV or PDF. The page, the CSV,
the PDF and the API read the same document, so they cannot disagree."""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.http import HttpResponse
from fpdf import FPDF
from fpdf.fonts import FontFace

from .domain import final_label
from .figures import MonthFigures
from .statement_view import statement_view


@dataclass(frozen=True)
class StatementDocument:
    tenant_slug: str
    tenant_name: str
    cost_centre: str
    month: dt.date
    closed: bool
    lines: list
    adjustments: list  # (amount, description, at, kind): kind "adjustment" or "withdrawal"
    figures: MonthFigures
    currency: str
    provider: str

    @property
    def status(self) -> str:
        return "closed" if self.closed else "open"

    @property
    def filename(self) -> str:
        return f"statement-{self.tenant_slug}-{self.month:%Y-%m}"


def statement_document(tenant, month: dt.date) -> StatementDocument:
    view = statement_view(tenant.pk, month)
    stmt = view.statement
    # A withdrawn adjustment stays, and its withdrawal follows it: the two net to nothing.
    adjustments = [(a.amount, a.description, a.at, a.kind) for a in view.adjustments]
    return StatementDocument(
        tenant_slug=tenant.slug, tenant_name=tenant.name, cost_centre=tenant.cost_centre,
        month=month, closed=bool(stmt and stmt.closed), lines=list(view.lines),
        adjustments=adjustments, figures=view.figures,
        currency=settings.PORTAL_CURRENCY, provider=settings.PORTAL_PROVIDER_NAME)


CSV_HEADER = ["tenant", "cost_centre", "month", "status", "kind", "description", "route",
              "policy", "allocated_device_hours", "used_device_hours", "idle_device_hours",
              "credited_device_hours", "charged_device_hours", "amount", "currency"]


def statement_csv(doc: StatementDocument) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(CSV_HEADER)
    head = [doc.tenant_slug, doc.cost_centre, f"{doc.month:%Y-%m}", doc.status]
    f, cur = doc.figures, doc.currency
    for line in doc.lines:
        w.writerow([*head, "line", line.description, line.route, line.policy,
                    f"{line.allocated_h:.4f}", f"{line.used_h:.4f}", f"{line.idle_h:.4f}",
                    f"{line.credit_h:.4f}", f"{line.charged_h:.4f}", f"{line.amount:.2f}", cur])
    w.writerow([*head, "total", "Usage", "", "", f"{f.allocated_h:.4f}", f"{f.used_h:.4f}",
                f"{f.idle_h:.4f}", f"{f.credit_h:.4f}", f"{f.charged_h:.4f}",
                f"{f.usage_amount:.2f}", cur])
    for amount, description, _at, kind in doc.adjustments:
        w.writerow([*head, kind, description, "", "", "", "", "", "", "", f"{amount:.2f}",
                    cur])
    # The kind stays "final" (the key a reader selects on); the words say whether it is.
    w.writerow([*head, "final", final_label(doc.closed), "", "", "", "", "", "", "",
                f"{f.final:.2f}", cur])
    return out.getvalue()


# A Unicode font when the system has one (the image installs DejaVu); otherwise the PDF core
# font, which has Latin-1 only: other characters are then shown as "?" rather than failing.
FONT_CANDIDATES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                   "/usr/share/fonts/TTF/DejaVuSans.ttf")


def _font_path() -> str | None:
    configured = getattr(settings, "PORTAL_PDF_FONT", "")
    for path in ((configured,) if configured else FONT_CANDIDATES):
        if path and os.path.isfile(path):
            return path
    return None


def _h(value: Decimal) -> str:
    return f"{value:,.2f}"


def statement_pdf(doc: StatementDocument) -> bytes:
    """A one-page-per-screenful A4 statement: who, which month, open or closed, each line
    with its hours and money, the total, adjustments with reasons, and the final amount."""
    pdf = FPDF(orientation="landscape", format="A4")
    pdf.set_title(f"Statement {doc.tenant_name} {doc.month:%B %Y}")
    pdf.set_author(doc.provider)
    pdf.set_creator("AI Factory Portal")
    font = _font_path()
    if font:
        pdf.add_font("body", "", font)
        pdf.add_font("body", "B", font.replace("DejaVuSans.ttf", "DejaVuSans-Bold.ttf")
                     if os.path.isfile(font.replace("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"))
                     else font)
        family = "body"

        def text(value) -> str:
            return str(value)
    else:
        family = "helvetica"

        def text(value) -> str:
            return str(value).encode("latin-1", "replace").decode("latin-1")

    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.add_page()
    pdf.set_font(family, "B", 16)
    pdf.cell(0, 9, text(f"{doc.provider} — statement"), new_x="LMARGIN", new_y="NEXT")
    pdf.set_font(family, "", 11)
    pdf.cell(0, 6, text(f"{doc.tenant_name} ({doc.tenant_slug}) · cost centre "
                        f"{doc.cost_centre or '—'} · {doc.month:%B %Y} · {doc.status}"),
             new_x="LMARGIN", new_y="NEXT")
    pdf.cell(0, 6, text(f"Amounts in {doc.currency}; hours are device-hours."),
             new_x="LMARGIN", new_y="NEXT")
    pdf.ln(3)
    f = doc.figures
    pdf.set_font(family, "", 9)
    widths = (95, 26, 26, 26, 26, 26, 32)
    head = FontFace(emphasis="BOLD", fill_color=(232, 236, 243))
    with pdf.table(col_widths=widths, text_align=("LEFT", "RIGHT", "RIGHT", "RIGHT", "RIGHT",
                                                  "RIGHT", "RIGHT"),
                   headings_style=head, line_height=5.5) as table:
        table.row([text(c) for c in ("Line", "Allocated h", "Used h", "Idle h", "Credited h",
                                     "Charged h", f"Amount ({doc.currency})")])
        for line in doc.lines:
            table.row([text(f"{line.description}\n{line.policy}"), _h(line.allocated_h),
                       _h(line.used_h), _h(line.idle_h), _h(line.credit_h),
                       _h(line.charged_h), f"{line.amount:,.2f}"])
        table.row([text("Total usage"), _h(f.allocated_h), _h(f.used_h), _h(f.idle_h),
                   _h(f.credit_h), _h(f.charged_h), f"{f.usage_amount:,.2f}"],
                  style=FontFace(emphasis="BOLD"))
    if doc.adjustments:
        pdf.ln(3)
        pdf.set_font(family, "B", 11)
        pdf.cell(0, 6, text("Adjustments"), new_x="LMARGIN", new_y="NEXT")
        pdf.set_font(family, "", 9)
        with pdf.table(col_widths=(40, 185, 32), text_align=("LEFT", "LEFT", "RIGHT"),
                       headings_style=head, line_height=5.5) as table:
            table.row([text("When (UTC)"), text("Reason"), text(f"Amount ({doc.currency})")])
            for amount, description, at, _kind in doc.adjustments:
                table.row([f"{at:%Y-%m-%d %H:%M}", text(description), f"{amount:,.2f}"])
    pdf.ln(4)
    pdf.set_font(family, "B", 13)
    # Only a closed month's total is final; an open month's is the month so far.
    label = final_label(doc.closed)
    pdf.cell(0, 8, text(f"{label}: {doc.currency} {f.final:,.2f}"), new_x="LMARGIN",
             new_y="NEXT")
    if not doc.closed:
        pdf.set_font(family, "", 9)
        pdf.cell(0, 5, text("This month is open: figures can still change until finance "
                            "closes it."), new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def statement_response(doc: StatementDocument, fmt: str):
    """The statement as a file download, for the page and the API alike."""
    if fmt == "pdf":
        response = HttpResponse(statement_pdf(doc), content_type="application/pdf")
    else:
        response = HttpResponse(statement_csv(doc), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{doc.filename}.{fmt}"'
    return response
