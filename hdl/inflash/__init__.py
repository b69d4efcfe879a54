"""KVNAND in-flash GEMV processing element (issue 6): the flash-plane description so far."""

from .spec import MAX_FMACS, FlashGeometry, busy_cycles

__all__ = ["MAX_FMACS", "FlashGeometry", "busy_cycles"]
