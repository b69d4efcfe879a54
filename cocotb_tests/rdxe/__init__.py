"""cocotb testbenches of the rDXE blocks (``cocotb_tests.rdxe.tb``, ``dxt_tb``, ``dxe_tb``,
``ring_tb``); the reduced Llama layer their DXE cases run is :mod:`sim.rdxe.reduced`."""
