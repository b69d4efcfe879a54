"""Print the per-layer cycle table of the two model shapes (``python -m sim.rdxe``).
"""

from .layers import cycle_table

if __name__ == "__main__":  # pragma: no cover - a printout
    print(cycle_table())
