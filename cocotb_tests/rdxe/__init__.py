"""cocotb testbench of the rDXE blocks (``cocotb_tests.rdxe.tb``)."""
