"""KVNAND in-flash processing element (issue 6): the flash-plane description, the page-stream
gearbox and the page-pipelined PE: GEMV (fp16, bf16, w8a8, w4a16) on weight pages, Logit and
Attend (fp16, bf16, int8; MHA and GQA) on KV pages."""

from .gearbox import Gearbox
from .pe import InflashPE
from .spec import (IMPLEMENTED_MODES, MAX_FMACS, FlashGeometry, Mapping, Mode, Op, PEConfig,
                   busy_cycles)

__all__ = ["MAX_FMACS", "FlashGeometry", "busy_cycles", "Mode", "IMPLEMENTED_MODES", "Op",
           "Mapping", "PEConfig", "Gearbox", "InflashPE"]
