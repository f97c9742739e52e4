"""One tenant's month as its statement shows it — on the page, in the API and in the
exports — read together and kept across reading requests until a write to what it holds."""

from __future__ import annotations

import datetime as dt
import pickle
from dataclasses import dataclass

from django.contrib.auth import get_user_model

from fleet.models import AllocationResize, Cluster
from tenants.kept_reads import kept_across_requests

from .cluster_usage import WhereItRan, where_it_ran
from .figures import FIGURE_MODELS, MonthFigures, tenant_month
from .models import Adjustment, ClusterUsageHour, Statement
from .services import open_months_before, statement_for


@dataclass(frozen=True)
class StatementView:
    statement: Statement | None
    lines: tuple  # StatementLine rows of a closed month, else the live Line rows
    figures: MonthFigures  # the one number: lines to the cent + adjustments
    adjustments: tuple[Adjustment, ...]  # in order, each with its withdrawal and author
    where_it_ran: dict[int, list[WhereItRan]]
    open_before: tuple[dt.date, ...]  # earlier months with usage still open, oldest first


@kept_across_requests(*FIGURE_MODELS, AllocationResize, ClusterUsageHour, Cluster,
                      get_user_model(), freeze=pickle.dumps, thaw=pickle.loads)
def statement_view(tenant_id: int, month: dt.date) -> StatementView:
    stmt, lines = statement_for(tenant_id, month)
    adjustments = tuple(stmt.adjustments.select_related("by", "withdraws", "withdrawal__by")
                        .order_by("at", "pk")) if stmt else ()
    return StatementView(
        statement=stmt, lines=tuple(lines), figures=tenant_month(tenant_id, month),
        adjustments=adjustments,
        where_it_ran=where_it_ran([line.allocation_id for line in lines], month),
        open_before=tuple(open_months_before(tenant_id, month)))
