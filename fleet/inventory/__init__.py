"""Inventory: pools and their rates, GPU nodes, outages, promisable capacity, and following
the fleet (sync and watch)."""
