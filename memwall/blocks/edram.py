"""Registry entries of the SHIELD segmented-refresh eDRAM controller and its FPGA stand-ins."""

from __future__ import annotations

from dataclasses import dataclass

from golden.edram import T_KELLE_US, T_REL_US, T_STD_US
from hdl.edram import SEGMENT_BITS, EdramController, EdramSystem, Policy, response_layout

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, register

#: The policy names a parameter set may give, lower case, in code order.
POLICY_NAMES = tuple(p.name.lower() for p in Policy)


@dataclass(frozen=True)
class EdramParams(BlockParams):
    """Geometry, clock, refresh intervals (us), slack (cycles) and the policy after reset, as
    :class:`hdl.edram.EdramController` takes and checks them.

    ``t_kelle_us`` defaults to where the calibrated retention model reaches Kelle's 2e-3 BER
    (:data:`golden.edram.T_KELLE_US`, 1968.9 us), rounded to 0.1 us.

    Parameters
    ----------
    policy : str
        Refresh policy after reset: ``shield``, ``standard`` or ``kelle`` (a ``SET_POLICY``
        request changes it at run time).
    """

    banks: int = 4
    rows: int = 64
    cols: int = 16
    clk_mhz: float = 100.0
    t_std_us: float = T_STD_US
    t_rel_us: float = T_REL_US
    t_kelle_us: float = round(T_KELLE_US, 1)
    slack: int = 8
    policy: str = "shield"
    counter_width: int = 32
    response_depth: int = 10

    def controller_args(self) -> dict:
        """Keyword arguments of :class:`hdl.edram.EdramController`."""
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"Policy (policy) must be one of {', '.join(POLICY_NAMES)}, "
                             f"not {self.policy!r}")
        args = {name: getattr(self, name) for name in self.names() if name != "policy"}
        return {**args, "policy": Policy[self.policy.upper()]}


_PRESETS = {
    # 1 MHz makes one cycle one microsecond: T_std = 45, T_rel = 1216 cycles, so simulations span
    # several relaxed intervals and the decay model shows real errors in seconds.
    "small": EdramParams(banks=2, rows=8, cols=4, clk_mhz=1.0, slack=4),
    "default": EdramParams(),
    # The paper's 2 MB workspace (Sec. IV-A): 1 Mi BF16 words; an edge-NPU clock of 1 GHz.
    "paper": EdramParams(banks=16, rows=256, cols=256, clk_mhz=1000.0, slack=16),
}

def _size(params: EdramParams, macros: bool = False) -> Size:
    """The controller's netlist (with ``macros``, the stand-ins' too): the response FIFO (and one
    memory per bank and segment) as storage; the row selections of the views and of the read data
    by bank (``word_select`` with a variable row: a product each) as multipliers; cells per global
    row (the release's row span and the liveness table), per bank and a fixed part."""
    banks, rows = params.banks, params.rows
    total = banks * rows                                  # global rows (liveness table bits)
    g_bits = (total - 1).bit_length()
    # The response queue: SyncFIFOBuffered, a register in front of a (depth - 1)-place memory.
    storage = response_layout().size * (params.response_depth - 1)
    if macros:
        storage += banks * rows * params.cols * sum(SEGMENT_BITS.values())
    # Per view (3), live and qo of a row across the banks; per segment the read data's bank.
    multipliers = (2 * 3 + 3) if banks > 1 else 0
    cells = (540                                  # pipeline stages, sweeps, ports, counters, queue
             + 5 * total                          # release span: two bound compares per row, ANDs
             + total // 16                        # liveness table: "any row live" group summaries
             + 2 * (total >> (g_bits // 2))       # probe: one live and one qo pick per row group
             + 3 * banks                          # refresh counters: popcount of the banks issued
             + (9 * banks if macros else 0))      # stand-ins: init, write and read port per memory
    return Size(storage_bits=storage, multipliers=multipliers, cells=cells)


def _timing(params, component) -> dict[str, StreamTiming]:
    controller = getattr(component, "controller", component)     # edram-fpga: macros around it
    return {"req": StreamTiming(throughput=1.0, model="docs/edram.md, Timing",
                                note="one request a cycle but for the cycles req.ready is low: a "
                                "forced refresh, the cycle after a SET_POLICY, a full queue"),
            "resp": StreamTiming(after="req", latency=controller.read_latency, throughput=1.0,
                                 note="a READ's data or a refused request's error; other "
                                 "requests answer nothing (docs/edram.md, Requests)")}

register(Block(
    name="edram",
    family="edram",
    summary="SHIELD eDRAM controller: BF16 split over 3 segments, lifecycle-aware refresh, "
            "run-time policy",
    params=EdramParams,
    presets=_PRESETS,
    build=lambda p: EdramController(**p.controller_args()),
    golden="golden.edram",
    testbench="cocotb_tests.edram.tb",
    timing=_timing,
    size=_size,
))

#: The stand-in holds its segments in block RAM, so its ``paper`` preset keeps the paper's intervals
#: at an FPGA's size and clock: 64 Ki words (128 KiB over the three segments), within an ECP5-85.
_FPGA_PRESETS = {**_PRESETS,
                 "paper": EdramParams(banks=16, rows=64, cols=64, clk_mhz=100.0, slack=16)}

register(Block(
    name="edram-fpga",
    family="edram",
    summary="SHIELD controller with Amaranth-memory stand-ins for the three eDRAM segments",
    params=EdramParams,
    presets=_FPGA_PRESETS,
    build=lambda p: EdramSystem(**p.controller_args()),
    golden="golden.edram",
    testbench="cocotb_tests.edram.tb",
    timing=_timing,
    size=lambda p: _size(p, macros=True),
))
