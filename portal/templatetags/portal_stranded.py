"""Stranded findings where people already look (the request page's allocation, the review of
a tenant's new request): the portal composes billing's reads into intake's pages, so intake
never imports billing."""

from django import template

from billing.stranded_board import standing_findings

register = template.Library()


@register.simple_tag
def allocation_findings(allocation):
    """The allocation's open findings at a glance, or None."""
    if allocation is None:
        return None
    return standing_findings(allocation_ids=[allocation.pk]).get(allocation.pk)


@register.simple_tag
def tenant_findings(tenant_id):
    """The tenant's open findings at a glance, or None."""
    return standing_findings(tenant_ids=[tenant_id]).get(tenant_id)
