"""Parameters of the rDXE golden models, the format constants, and the checks every model applies
to its arguments.

The models take the hardware's own parameters as they are (checked once, on construction): a
tile's ``hdl.rdxe.DxtConfig`` (the registry's ``rdxe-dxt`` parameters), and for a VAC's own steps
one VAC's ``hdl.rdxe.VacConfig`` (``rdxe-vac``'s). A GEMV's layout and cycles also run on a ring
of ``vacs`` VACs of one ``VacConfig`` (``hdl.rdxe.HlinkSource``), not only on a tile.
"""

from __future__ import annotations

import numpy as np

from hdl.arith.format import FP32
from hdl.arith.requant import SHIFT_BITS
from hdl.rdxe.spec import GBUS_BYTES, DxtConfig, VacConfig
from hdl.rdxe.vac import MAX_VACS
from hdl.validate import integer

__all__ = [
    "LAYOUTS", "MODES", "P_ONE", "SHIFT_MAX", "GBUS_BYTES", "MAX_INPUTS", "MAX_TOKENS",
    "DxtConfig", "VacConfig",
]

#: KV-cache layouts: "iwur" (the design) and "baseline" (K column-wise, V row-wise).
LAYOUTS = ("iwur", "baseline")
#: VRC modes: "fused" (RC applied to the accumulator) and "sequential" (normalize first).
MODES = ("fused", "sequential")
#: INT8 activation code of exp(0) = 1 in the softmax P.V.
P_ONE = 127
#: Largest requantizer shift: the shift field's (``hdl.arith.requant.SHIFT_BITS``, 6 bits).
SHIFT_MAX = (1 << SHIFT_BITS) - 1
#: Longest GEMV input: sum(x**2) < 2**30 and every INT32 accumulator is exact.
MAX_INPUTS = 1 << 16
#: Most tokens of a softmax row: sum(p) <= 127 * 2**16 < 2**24 converts to fp32 exactly.
MAX_TOKENS = 1 << 16
_INT8 = (-128, 127)


# --- validation -----------------------------------------------------------------------------------


def _ints(values, what: str, lo: int, hi: int, ndim: int | None = None,
          shape: str = "") -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer array, not {arr.dtype}")
    if ndim is not None and (arr.ndim != ndim or 0 in arr.shape):
        raise ValueError(f"{what} must be a non-empty {shape} array, not shape {arr.shape}")
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        bad = int(arr.min()) if int(arr.min()) < lo else int(arr.max())
        raise ValueError(f"{what} must be between {lo} and {hi}, not {bad}")
    return arr.astype(np.int64)


def _int8(values, what: str, ndim: int, shape: str) -> np.ndarray:
    return _ints(values, what, *_INT8, ndim=ndim, shape=shape)


def _ppu_args(m, shift, outputs: int, params: VacConfig) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = -(1 << (params.mult_bits - 1)), (1 << (params.mult_bits - 1)) - 1
    m = _ints(m, "PPU multiplier", lo, hi)
    shift = _ints(shift, "PPU shift", 0, SHIFT_MAX)
    for arr, what in ((m, "PPU multiplier"), (shift, "PPU shift")):
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != outputs):
            raise ValueError(f"{what} must be a scalar or one value per output ({outputs}), "
                             f"not shape {arr.shape}")
    return np.broadcast_to(m, (outputs,)), np.broadcast_to(shift, (outputs,))


def _fp32_code(value, what: str, *, zero: bool) -> np.uint32:
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{what} must be an fp32 bit pattern (an integer), not {value!r}")
    value = int(value)
    if not 0 <= value < 1 << 32:
        raise ValueError(f"{what} must be a 32-bit code between 0 and 4294967295, not {value}")
    field = (value >> FP32.man_bits) & FP32.exp_max_field
    ok = (value >> 31) == 0 and 0 < field < FP32.exp_max_field
    if not (ok or (zero and value == 0)):
        kind = "+0 or a positive normal" if zero else "a positive normal"
        raise ValueError(f"{what} must be {kind} fp32 value, not 0x{value:08X}")
    return np.uint32(value)


def _mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"Mode must be 'fused' or 'sequential', not {mode!r}")
    return mode


def _layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"Layout must be 'iwur' or 'baseline', not {layout!r}")
    return layout


def _params(params) -> DxtConfig:
    """A tile's parameters: an ``hdl.rdxe.DxtConfig`` (the registry's ``rdxe-dxt`` parameters
    are one)."""
    if not isinstance(params, DxtConfig):
        raise TypeError(f"Parameters must be a DxtConfig, not {type(params).__name__}")
    return params


def _vac_params(params) -> VacConfig:
    """One VAC's parameters, for the models of a VAC's own steps (PPU, RC factor): an
    ``hdl.rdxe.VacConfig`` (the registry's ``rdxe-vac`` parameters), or a tile's ``DxtConfig``
    (one of its VACs)."""
    if not isinstance(params, VacConfig):
        raise TypeError(f"Parameters must be a VacConfig or a DxtConfig, not "
                        f"{type(params).__name__}")
    return params


def _ring(params, vacs) -> tuple[VacConfig, int]:
    """The VACs a GEMV runs on, ``(params, N)``: a tile's (a ``DxtConfig``, ``vacs`` None), or a
    ring of ``vacs`` VACs of one ``VacConfig`` (1 to 64, as ``hdl.rdxe.HlinkSource`` takes)."""
    if isinstance(params, DxtConfig):
        if vacs is not None:
            raise TypeError(f"VAC count must be None with a DxtConfig (it has {params.vacs}), "
                            f"not {vacs!r}")
        return params, params.vacs
    if not isinstance(params, VacConfig):
        raise TypeError(f"Parameters must be a DxtConfig or a VacConfig, not "
                        f"{type(params).__name__}")
    if vacs is None:
        raise TypeError(f"VAC count must be an integer between 1 and {MAX_VACS} with a "
                        f"VacConfig, not None")
    return params, integer(vacs, "VAC count", 1, MAX_VACS)
