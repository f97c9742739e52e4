"""Allocations: the lifecycle, rendered manifests, provisioning sinks (apply or Git), and how
a tenant uses an allocation."""
