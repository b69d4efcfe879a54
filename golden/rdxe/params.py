"""Parameters of the rDXE golden models: the tile's :class:`RdxeParams`, the format
constants, and the checks every model applies to its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.arith.format import FP32
from hdl.rdxe.spec import DxtConfig, KVGeometry, VacConfig, check_rc_clamp, check_tile
from hdl.validate import integer, power_of_two

__all__ = [
    "LAYOUTS", "MODES", "P_ONE", "SHIFT_MAX", "GBUS_BYTES", "MAX_INPUTS", "MAX_TOKENS",
    "RdxeParams",
]

#: KV-cache layouts: "iwur" (the design) and "baseline" (K column-wise, V row-wise).
LAYOUTS = ("iwur", "baseline")
#: VRC modes: "fused" (RC applied to the accumulator) and "sequential" (normalize first).
MODES = ("fused", "sequential")
#: INT8 activation code of exp(0) = 1 in the softmax P.V.
P_ONE = 127
#: Largest requantizer shift: the shift field is 6 bits (hdl.arith.requant.SHIFT_BITS).
SHIFT_MAX = 63
#: Bytes per GBUS transfer (32-bit bus).
GBUS_BYTES = 4
#: Longest GEMV input: sum(x**2) < 2**30 and every INT32 accumulator is exact.
MAX_INPUTS = 1 << 16
#: Most tokens of a softmax row: sum(p) <= 127 * 2**16 < 2**24 converts to fp32 exactly.
MAX_TOKENS = 1 << 16
_INT8 = (-128, 127)


# --- parameters -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RdxeParams:
    """Parameters of one decoder execution tile (DXT), checked on construction.

    Parameters
    ----------
    lanes : int
        Multipliers per VAC and bytes per WMEM / KV-cache row: a power of two from 1 to 64 (16).
    vacs : int
        VACs per DXT, ``N``: 1 to 64 (16 in the paper).
    wmem_depth : int
        WMEM rows per VAC (``lanes`` bytes each): 1 to 2**20 (1024: 16 KB).
    kv_rows : int
        KV-cache rows per VAC, a power of two from 2 to 2**20 (512); the first half holds K, the
        second half V. It must hold at least one token.
    head_dim : int
        Head dimension ``d``: a multiple of ``lanes`` from ``lanes`` to 1024 (64).
    group_size : int
        GQA group size ``G`` (query heads per KV head): 1 to 64 (1: MHA).
    kv_groups : int
        KV groups one DXT's caches hold: 1 to 64 (1). Group ``g`` has rows ``g * group_rows ..
        (g + 1) * group_rows - 1`` of the K half and as many of the V half of every VAC's cache
        (``group_rows = kv_rows / 2 // kv_groups``); query head ``h`` reads group ``h // G``.
    mult_bits : int
        Width of the PPU's signed multipliers: 2 to 32 (32).
    clamp : str
        INT8 range of every PPU and activation requantizer: ``"symmetric"`` [-127, 127]
        (default) or ``"full"`` [-128, 127].
    rc_bits : int
        Width of the RC factor: 16 to 30 (25); ``rc_bits - 6`` significand bits and a 6-bit
        shift.
    norm_frac : int
        Fraction bits of the RMSNorm RCU output and of the sequential mode's normalized
        activations: 0 to 7 (4: normalized values in [-7.9, 7.9] in steps of 1/16).
    prob_frac : int
        Fraction bits of the softmax RCU output and of the sequential mode's probabilities:
        0 to 7 (7: probabilities in [0, 127/128] in steps of 1/128).

    Raises
    ------
    TypeError, ValueError
        A message naming the parameter, the allowed values and the value given.
    """

    lanes: int = 16
    vacs: int = 16
    wmem_depth: int = 1024
    kv_rows: int = 512
    head_dim: int = 64
    group_size: int = 1
    kv_groups: int = 1
    mult_bits: int = 32
    clamp: str = "symmetric"
    rc_bits: int = 25
    norm_frac: int = 4
    prob_frac: int = 7

    def __post_init__(self):
        power_of_two(self.lanes, "Lane count", 1, 64)
        integer(self.vacs, "VAC count", 1, 64)
        integer(self.wmem_depth, "WMEM depth", 1, 1 << 20)
        power_of_two(self.kv_rows, "KV-cache row count", 2, 1 << 20)
        integer(self.mult_bits, "PPU multiplier width", 2, 32)
        check_rc_clamp(self.rc_bits, self.clamp)
        check_tile(self)

    @property
    def rc_mant_bits(self) -> int:
        """Significand bits of the RC factor: ``rc_bits - 6``."""
        return self.rc_bits - 6

    @property
    def kv(self) -> KVGeometry:
        """The iWuR cache's shape (shared with hdl.rdxe.DxtConfig)."""
        return KVGeometry(self.lanes, self.vacs, self.head_dim, self.kv_rows, self.kv_groups)

    key_rows = property(lambda self: self.kv.key_rows,
                        doc="KV-cache rows per key (iWuR): ``head_dim / lanes``.")
    value_rows = property(lambda self: self.kv.value_rows,
                          doc="V channels per VAC, ``ceil(head_dim / vacs)``: iWuR V rows per "
                              "block of ``lanes`` tokens.")
    half_rows = property(lambda self: self.kv.half_rows,
                         doc="Rows of each KV-cache region (K first, then V): ``kv_rows / 2``.")
    group_rows = property(lambda self: self.kv.group_rows,
                          doc="Rows of each KV group in each half: ``kv_rows / 2 // kv_groups``.")

    @property
    def out_limits(self) -> tuple[int, int]:
        """INT8 range of the requantized outputs and activations."""
        return (-127 if self.clamp == "symmetric" else -128), 127


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


def _ppu_args(m, shift, outputs: int, params: RdxeParams) -> tuple[np.ndarray, np.ndarray]:
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


def _params(params) -> RdxeParams | DxtConfig:
    """A tile's parameters: the model's :class:`RdxeParams` or the hardware's ``DxtConfig``
    (the registry's ``rdxe-dxt`` parameters), which has every field the models read."""
    if not isinstance(params, (RdxeParams, DxtConfig)):
        raise TypeError(f"Parameters must be an RdxeParams or a DxtConfig, not "
                        f"{type(params).__name__}")
    return params


def _vac_params(params) -> RdxeParams | VacConfig:
    """One VAC's parameters, for the models of a VAC's own steps (PPU, RC factor): a tile's, or
    the hardware's ``VacConfig`` (the registry's ``rdxe-vac`` parameters)."""
    if not isinstance(params, (RdxeParams, VacConfig)):
        raise TypeError(f"Parameters must be an RdxeParams or a VacConfig, not "
                        f"{type(params).__name__}")
    return params
