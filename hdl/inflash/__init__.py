"""KVNAND in-flash GEMV processing element (issue 6): the flash-plane description, the page-stream
gearbox and the page-pipelined GEMV PE (fp16, bf16, w8a8, w4a16)."""

from .gearbox import Gearbox
from .pe import InflashPE
from .spec import (IMPLEMENTED_MODES, MAX_FMACS, FlashGeometry, Mode, PEConfig, busy_cycles)

__all__ = ["MAX_FMACS", "FlashGeometry", "busy_cycles", "Mode", "IMPLEMENTED_MODES", "PEConfig",
           "Gearbox", "InflashPE"]
