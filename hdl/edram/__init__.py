"""SHIELD segmented-refresh eDRAM: controller, its sub-components, bank-port interface, refresh
timing, FPGA stand-in."""

from .bankport import BankPortDriver
from .controller import EdramController
from .liveness import LivenessTable
from .macro import EdramMacro, EdramSystem
from .ports import BankPortSignature, Op, TensorClass, request_layout, response_layout
from .request import COMMIT_LATENCY, RequestPipeline
from .response import ResponsePath
from .scheduler import SweepScheduler
from .spec import (MANT_BITS, SEGMENT_BITS, SEGMENTS, STD_BITS, WORD_BITS, Policy, RefreshPlan,
                   Sweep, us_to_cycles)
from .status import StatusCounters, counter_layout, status_layout

__all__ = ["EdramController", "EdramMacro", "EdramSystem", "BankPortSignature", "Op",
           "TensorClass", "Policy", "RefreshPlan", "Sweep", "SEGMENTS", "SEGMENT_BITS",
           "STD_BITS", "MANT_BITS", "WORD_BITS", "request_layout", "response_layout",
           "counter_layout", "status_layout", "us_to_cycles", "COMMIT_LATENCY",
           "RequestPipeline", "LivenessTable", "SweepScheduler", "BankPortDriver",
           "ResponsePath", "StatusCounters"]
