from django.urls import path

from . import views

app_name = "billing"
urlpatterns = [
    path("billing/", views.finance_overview, name="overview"),
    path("billing/rates/", views.rates, name="rates"),
    path("billing/budgets/", views.budgets, name="budgets"),
    path("billing/<slug:slug>/<str:month>/", views.statement, name="statement"),
    path("billing/<slug:slug>/<str:month>/close/", views.statement_close, name="close"),
    path("billing/<slug:slug>/<str:month>/adjust/", views.statement_adjust, name="adjust"),
    path("billing/<slug:slug>/<str:month>/adjustments/<int:adjustment_id>/withdraw/",
         views.adjustment_withdraw, name="withdraw"),
    path("billing/<slug:slug>/<str:month>/reopen/", views.statement_reopen, name="reopen"),
    path("billing/<slug:slug>/<str:month>/allocations/<int:allocation_id>/",
         views.allocation_hours, name="hours"),
]
