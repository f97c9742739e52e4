"""Queues: what Kueue does with an allocation's work, read back, stored and explained."""
