from celery import shared_task


@shared_task(name="billing.tasks.rollup_recent_usage")
def rollup_recent_usage() -> str:
    """Hourly usage rollup (beat): the last hours plus any hour still pending."""
    from .services import rollup_recent, sync_pool_rates

    sync_pool_rates()  # a rate card that came into force updates the intake estimate
    return rollup_recent().summary()
