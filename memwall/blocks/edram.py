"""Registry entries of the SHIELD segmented-refresh eDRAM controller and its FPGA stand-in system."""

from __future__ import annotations

from dataclasses import dataclass

from golden.edram import T_KELLE_US, T_REL_US, T_STD_US
from hdl.edram import EdramController, EdramSystem, Policy

from ..params import BlockParams
from ..registry import Block, StreamTiming, register

#: The policy names a parameter set may give, lower case, in code order.
POLICY_NAMES = tuple(p.name.lower() for p in Policy)


@dataclass(frozen=True)
class EdramParams(BlockParams):
    """Geometry, clock, refresh intervals (us), slack (cycles) and the policy after reset.

    ``t_kelle_us`` defaults to where the calibrated retention model reaches Kelle's 2e-3 BER
    (:data:`golden.edram.T_KELLE_US`, 1968.9 us), rounded to 0.1 us.
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
))
