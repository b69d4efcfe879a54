"""Bit-exact NumPy models of the shared numeric units in hdl/arith, plus float64 references."""
