"""Signals the fleet sends, so apps above it can follow without being imported."""

from django.dispatch import Signal

# Sent after commit with allocation_id, old and new status.
allocation_status_changed = Signal()
