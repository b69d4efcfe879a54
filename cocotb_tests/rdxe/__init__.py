"""cocotb testbenches of the rDXE blocks (``cocotb_tests.rdxe.tb``, ``dxt_tb``, ``dxe_tb``) and the
reduced Llama layer their DXE cases and tests run (``layer``)."""
