"""memwall's cocotb testbenches and their launcher (docs/verification.md)."""

import gc

import cocotb

if cocotb.is_simulation:
    # In the simulator's Python a testbench allocates small objects every cycle and frees them
    # soon; the cyclic collector's passes over the long-lived imports (Amaranth, NumPy, the
    # golden models) are wasted work (docs/verification.md, "Garbage collection").
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
