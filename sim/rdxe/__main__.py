"""Print the per-layer cycle table of the two model shapes and the DXE controller's vector-op
cycles of SmolLM2's layer (``python -m sim.rdxe``).
"""

from .host import vector_cycle_table
from .layers import cycle_table

if __name__ == "__main__":  # pragma: no cover - a printout
    print(cycle_table())
    print()
    print(vector_cycle_table())
