"""Shared numeric units: float formats, multipliers, adders, conversions, exp2, reciprocal, rsqrt,
requantization and dot products. Import the submodules (``hdl.arith.format`` ...) directly."""
