"""SHIELD segmented-refresh eDRAM: controller, bank-port interface, refresh timing, FPGA stand-in."""

from .controller import EdramController, counter_layout, status_layout
from .macro import EdramMacro, EdramSystem
from .ports import BankPortSignature, Op, TensorClass, request_layout, response_layout
from .spec import (MANT_BITS, SEGMENT_BITS, SEGMENTS, STD_BITS, WORD_BITS, Policy, RefreshPlan,
                   Sweep, us_to_cycles)

__all__ = ["EdramController", "EdramMacro", "EdramSystem", "BankPortSignature", "Op",
           "TensorClass", "Policy", "RefreshPlan", "Sweep", "SEGMENTS", "SEGMENT_BITS",
           "STD_BITS", "MANT_BITS", "WORD_BITS", "request_layout", "response_layout",
           "counter_layout", "status_layout", "us_to_cycles"]
