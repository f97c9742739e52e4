from django.urls import path

from . import stranded_views, views

app_name = "billing"
urlpatterns = [
    path("billing/", views.finance_overview, name="overview"),
    path("billing/rates/", views.rates, name="rates"),
    path("billing/budgets/", views.budgets, name="budgets"),
    path("stranded/", stranded_views.stranded, name="stranded"),
    path("stranded/board/", stranded_views.stranded_board, name="stranded_board"),
    path("stranded/policy/<slug:slug>/", stranded_views.stranded_policy,
         name="stranded_policy"),
    path("stranded/<int:finding_id>/", stranded_views.stranded_finding,
         name="stranded_finding"),
    path("stranded/<int:finding_id>/answer/", stranded_views.stranded_answer,
         name="stranded_answer"),
    path("billing/<slug:slug>/<str:month>/", views.statement, name="statement"),
    path("billing/<slug:slug>/<str:month>/close/", views.statement_close, name="close"),
    path("billing/<slug:slug>/<str:month>/adjust/", views.statement_adjust, name="adjust"),
    path("billing/<slug:slug>/<str:month>/adjustments/<int:adjustment_id>/withdraw/",
         views.adjustment_withdraw, name="withdraw"),
    path("billing/<slug:slug>/<str:month>/reopen/", views.statement_reopen, name="reopen"),
    path("billing/<slug:slug>/<str:month>/allocations/<int:allocation_id>/",
         views.allocation_hours, name="hours"),
]
