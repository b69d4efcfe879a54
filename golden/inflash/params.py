"""Parameters of the KVNAND in-flash golden models: the precision modes, KV formats and mappings,
the limits, and the checks every model applies to its arguments.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hdl.arith.format import BF16, FP16, FloatFormat
from hdl.inflash.spec import MAX_FMACS
from hdl.validate import power_of_two

__all__ = [
    "MODES", "KV_FORMATS", "MAPPINGS", "K", "V", "MAX_TOKENS", "ERASED", "ACC_LOOP",
]

#: Precision modes of the GEMV.
MODES = ("fp16", "bf16", "w8a8", "w4a16")
#: Element formats of the KV cache (``int8`` is the KV cache of the W8A8 setting).
KV_FORMATS = ("fp16", "bf16", "int8")
#: KV mappings: ``page`` (page-level, the paper's) and ``naive`` (generation order).
MAPPINGS = ("page", "naive")
#: Kind codes of a KV entry.
K, V = 0, 1
#: Longest sequence of the KV models.
MAX_TOKENS = 1 << 24
#: Byte value of the unused tail of a page (the erased state of NAND flash).
ERASED = 0xFF
#: Cycles between two updates of one fp32 accumulator in Attend: the loop of a
#: :class:`hdl.arith.fpmac.FloatMAC` at its default stages (multiplier 5 + adder 6).
ACC_LOOP = 11

_FLOAT = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}
_KV_FLOAT = {"fp16": FP16, "bf16": BF16}


# --- validation helpers ---------------------------------------------------------------------------


def _pow2(value, what: str, minimum: int, maximum: int) -> int:
    """``value`` itself (not its log) if it is a power of two in ``[minimum, maximum]``."""
    power_of_two(value, what, minimum, maximum)
    return int(value)


def _choice(value, what: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"
        raise ValueError(f"{what} must be {listed}, not {value!r}")
    return value


def _fmacs(fmacs) -> None:
    if fmacs is not None:
        _pow2(fmacs, "FMAC count", 1, MAX_FMACS)


def _array(values, what: str, ndim: int, shape_text: str, kind: str) -> np.ndarray:
    """Return ``values`` as an integer array of ``ndim`` dimensions with codes of ``kind``.

    ``kind``: ``fp16``/``bf16`` (16-bit codes, ``np.uint16``), ``int8`` (``np.int8``), ``int4``
    (unsigned codes 0..15, ``np.uint8``).
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        name = f"{kind} bit patterns" if kind in ("fp16", "bf16") else f"{kind} codes"
        raise TypeError(f"{what} must be {name} (an integer array), not {arr.dtype}")
    if arr.ndim != ndim or 0 in arr.shape:
        raise ValueError(f"{what} must be a non-empty {shape_text} array, not shape {arr.shape}")
    lo, hi = int(arr.min()), int(arr.max())
    if kind in ("fp16", "bf16"):
        low, high, text, dtype = 0, 0xFFFF, "16-bit codes", np.uint16
    elif kind == "int8":
        low, high, text, dtype = -128, 127, "int8 values", np.int8
    else:
        low, high, text, dtype = 0, 15, "int4 codes", np.uint8
    if lo < low or hi > high:
        raise ValueError(f"{what} must be {text} between {low} and {high}, "
                         f"not {lo if lo < low else hi}")
    return arr.astype(dtype)


def _values(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Float64 values of fp16/bf16 codes, subnormals kept (the reference's view, no flush)."""
    dtype = np.float16 if fmt == FP16 else ml_dtypes.bfloat16
    return np.asarray(codes, dtype=np.uint16).view(dtype).astype(np.float64)
