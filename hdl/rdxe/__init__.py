"""rDXE decoder execution tile (issue 5). First increment: the vector-accumulate core (VAC) with
its post-processing unit (PPU) and recompute unit (RCU), and the credit-keeping HLINK source that
feeds a ring of VACs. The golden model is ``golden/rdxe.py`` (docs/rdxe_models.md)."""

from .spec import VacConfig, hlink_layout, ppu_layout, rc_layout, result_layout, wmem_layout
from .vac import MAX_VACS, HlinkSource, Vac

__all__ = ["VacConfig", "Vac", "HlinkSource", "MAX_VACS", "hlink_layout", "rc_layout",
           "wmem_layout", "ppu_layout", "result_layout"]
