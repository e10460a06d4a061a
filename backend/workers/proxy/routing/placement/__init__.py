"""Placement: which owner of a model the front door tries first (docs/PLACEMENT.md).

``reference`` (the reference system's rule) and ``pair`` (expected completion time) are pure
functions of ``inputs.Candidate`` values; ``placer.Placer`` gathers those values from the table,
the reservations and the router's measurements, and applies the configured rule.
"""
