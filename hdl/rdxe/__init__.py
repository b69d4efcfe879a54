"""rDXE decoder execution tile (issue 5): the vector-accumulate core (VAC) with its PPU, RCU and
KV cache, the credit-keeping HLINK source, the vector engine (VE) of VRC and the DXT that
assembles them from its sub-components (sequencer, token buffer, chunk feed, gatherer, KV
writer); the DXE's layer controller, DXT side and the two joined (docs/rdxe.md section 14), and
a ring of DXEs (docs/rdxe.md 16.3).
The golden model is ``golden/rdxe/`` (docs/rdxe_models.md)."""

from .chunks import ChunkFeed, TokenBuffer
from .ctrl import CtrlConfig, DxeController
from .dxe import Dxe
from .dxt import Dxt
from .dxtside import DxtSide
from .gbus import Gatherer, KvWriter
from .gppu import Gppu, GppuOp
from .quant import Quantizer
from .ring import Ring
from .scalar import ScalarOp, ScalarUnit
from .sequencer import Sequencer
from .spec import (DESTS, GBUS_BYTES, OPS, DxtConfig, KVGeometry, VacConfig, VeConfig,
                   command_layout, hlink_layout, kv_layout, ppu_layout, rc_layout,
                   response_layout, result_layout, wmem_layout, word_layout)
from .vac import MAX_VACS, HlinkSource, Vac, VacRing
from .ve import Activations, Normalizer, RcUnit

__all__ = ["VacConfig", "VeConfig", "DxtConfig", "KVGeometry", "Vac", "HlinkSource", "VacRing",
           "RcUnit", "Activations", "Normalizer", "Dxt", "Sequencer", "TokenBuffer", "ChunkFeed",
           "Gatherer", "KvWriter", "Gppu", "GppuOp", "Quantizer", "ScalarUnit", "ScalarOp",
           "CtrlConfig", "DxeController", "DxtSide", "Dxe", "Ring", "MAX_VACS", "GBUS_BYTES",
           "OPS", "DESTS",
           "hlink_layout", "rc_layout", "wmem_layout", "ppu_layout", "kv_layout",
           "result_layout", "command_layout", "word_layout", "response_layout"]
