# amaranth: UnusedElaboratable=no
"""Build a unit only to read its properties (a latency, a depth), without elaborating it.

A component's latency is a property of its configuration, but reading it means building the
component, and Amaranth warns about an elaboratable that is built and never elaborated. The
first line of this module tells Amaranth's linter that the units built here are such probes.
"""

from __future__ import annotations

__all__ = ["probe"]


def probe(unit_class, *args, **kwargs):
    """Return ``unit_class(*args, **kwargs)``, built to be read and never elaborated."""
    return unit_class(*args, **kwargs)
