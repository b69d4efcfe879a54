"""Binary floating-point format descriptions shared by the arithmetic units and their golden models.

A :class:`FloatFormat` is a pure description (no hardware): sign bit, ``exp_bits`` biased exponent
bits and ``man_bits`` stored fraction bits, IEEE 754 style. memwall's units use these conventions
(documented in docs/arith.md):

* rounding to nearest, ties to even;
* subnormal inputs are read as zero of the same sign, and results that would be subnormal are
  flushed to zero of the same sign (flush-to-zero, FTZ);
* infinities and NaN follow IEEE 754; every NaN result is the canonical quiet NaN of the result
  format (sign 0, exponent all ones, fraction MSB set: fp32 ``0x7FC00000``, bf16 ``0x7FC0``, fp16
  ``0x7E00``).

The golden models in :mod:`golden.arith` take these descriptions as parameters, the same objects
the RTL takes; each side computes on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validate import integer

__all__ = ["FloatFormat", "BF16", "FP16", "FP32", "FORMATS", "float_format"]


@dataclass(frozen=True)
class FloatFormat:
    """Describe a binary floating-point format.

    Parameters
    ----------
    name : str
        Short name used in block names, manifests and messages (``bf16``).
    exp_bits : int
        Biased exponent width, 2 to 11.
    man_bits : int
        Stored fraction width (without the hidden bit), 1 to 52.
    """

    name: str
    exp_bits: int
    man_bits: int

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Float format name must be a non-empty string, not {self.name!r}")
        integer(self.exp_bits, "Exponent width", 2, 11)
        integer(self.man_bits, "Fraction width", 1, 52)

    @property
    def width(self) -> int:
        """Total bits: sign + exponent + fraction."""
        return 1 + self.exp_bits + self.man_bits

    @property
    def precision(self) -> int:
        """Significand bits including the hidden bit."""
        return self.man_bits + 1

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def exp_max_field(self) -> int:
        """The all-ones exponent field (infinity and NaN)."""
        return (1 << self.exp_bits) - 1

    @property
    def emax(self) -> int:
        """Largest unbiased exponent of a normal number."""
        return self.exp_max_field - 1 - self.bias

    @property
    def emin(self) -> int:
        """Smallest unbiased exponent of a normal number."""
        return 1 - self.bias

    def pack(self, sign: int, exp_field: int, fraction: int) -> int:
        """Return the bit pattern of the given fields (each checked against its width)."""
        if sign not in (0, 1) or not 0 <= exp_field <= self.exp_max_field or \
                not 0 <= fraction < 1 << self.man_bits:
            raise ValueError(f"{self.name}: fields sign={sign}, exponent={exp_field}, "
                             f"fraction={fraction} do not fit 1, {self.exp_bits} and "
                             f"{self.man_bits} bits")
        return (sign << (self.width - 1)) | (exp_field << self.man_bits) | fraction

    def infinity(self, sign: int = 0) -> int:
        return self.pack(sign, self.exp_max_field, 0)

    @property
    def canonical_nan(self) -> int:
        """The one NaN the units produce: sign 0, exponent all ones, fraction MSB set."""
        return self.pack(0, self.exp_max_field, 1 << (self.man_bits - 1))

    @property
    def max_normal(self) -> int:
        return self.pack(0, self.exp_max_field - 1, (1 << self.man_bits) - 1)

    @property
    def min_normal(self) -> int:
        return self.pack(0, 1, 0)

    def fields(self, value):
        """Split a bit pattern (an Amaranth Value) into ``(sign, exp_field, fraction)`` slices."""
        return (value[self.width - 1], value[self.man_bits:self.man_bits + self.exp_bits],
                value[:self.man_bits])

    def __str__(self):
        return self.name


BF16 = FloatFormat("bf16", 8, 7)
FP16 = FloatFormat("fp16", 5, 10)
FP32 = FloatFormat("fp32", 8, 23)

#: The preset formats by name.
FORMATS = {f.name: f for f in (BF16, FP16, FP32)}


def float_format(value) -> FloatFormat:
    """Return a :class:`FloatFormat` for a preset name or a format object.

    Raises
    ------
    ValueError
        For an unknown name, listing the preset names.
    """
    if isinstance(value, FloatFormat):
        return value
    if isinstance(value, str) and value.lower() in FORMATS:
        return FORMATS[value.lower()]
    raise ValueError(f"Float format must be one of {', '.join(FORMATS)} (or a FloatFormat), "
                     f"not {value!r}")
