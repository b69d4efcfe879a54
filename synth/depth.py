"""Logic depth of an ECP5 netlist before placement: which paths a placement will fail on.

``memwall synth --target ecp5`` leaves Yosys's mapped netlist in ``net.json`` (``synth_ecp5
-json``). A placement of a large design takes most of an hour and names one critical path; this
report takes a second and ranks every register-to-register path of the netlist by a fixed delay
model, grouped by the hierarchy its start and end lie in::

    python -m synth.depth build/rdxe-dxe/small/ecp5/net.json [--module top] [--paths 12]

The model (:data:`DELAYS`) is not nextpnr's: every net is one route of :data:`ROUTE` ns (a
carry chain's own links none), a LUT4 0.4 ns, a block RAM's output 5.8 ns after the clock
(``DP16KD`` without its output register), an unregistered ``MULT18X18D`` 4 ns. It orders paths
as logic depth does; placed and routed, a design whose model worst lies near 13 ns has reached
about 100 MHz (the DXT, docs/rdxe.md 9.1 and 14.4), one near 16 ns about 64 MHz. Use it to
find what to pipeline, then measure with a placement.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DELAYS", "ROUTE", "Depth", "depth", "report", "main"]

#: ns of one route between two cells (a carry chain's ``CIN`` none, a mux inside a slice 0.05).
ROUTE = 1.0
#: ns through a cell from an input to an output, by cell type.
DELAYS = {"LUT4": 0.4, "PFUMX": 0.25, "L6MUX21": 0.25, "TRELLIS_DPR16X4": 0.5,
          "MULT18X18D": 4.0}
#: ns from the clock to a register's or a block RAM's output, and a register's setup.
FF_CLOCK, BRAM_CLOCK, SETUP = 0.4, 5.8, 0.1
#: Carry cell (CCU2C) delays: into the sum, into the carry out, carry in to carry out.
CARRY_SUM, CARRY_OUT, CARRY_CHAIN, CARRY_IN_SUM = 0.5, 0.45, 0.06, 0.3
_SLICE_MUXES = ("PFUMX", "L6MUX21")


@dataclass
class Depth:
    """The arrival of every net bit and the endpoints, latest first."""

    names: dict                  # net bit -> its shortest public name
    arrival: dict                # net bit -> ns
    prev: dict                   # net bit -> the bit it arrives from
    ends: list = field(default_factory=list)   # (ns, bit, cell, pin), latest first

    def path(self, bit) -> list:
        """The bits of the latest path into ``bit``, from its start."""
        chain = [bit]
        while chain[-1] in self.prev:
            chain.append(self.prev[chain[-1]])
        return chain[::-1]

    def group(self, bit, levels: int = 2) -> str:
        """The first ``levels`` hierarchy levels of the bit's name."""
        parts = self.names.get(bit, f"${bit}").lstrip("\\").split(".")
        return ".".join(parts[:levels]) if len(parts) > 1 else parts[0][:40]


def _names(module: dict) -> dict:
    names = {}
    for name, net in module["netnames"].items():
        for b in net["bits"]:
            if not isinstance(b, int):
                continue
            old = names.get(b)
            public = not name.startswith("$")
            if old is None or (public and old.startswith("$")) or \
                    (public == (not old.startswith("$")) and len(name) < len(old)):
                names[b] = name
    return names


def _pins(cell: dict, direction: str) -> list:
    dirs = cell["port_directions"]
    return [(p, b) for p, bits in cell["connections"].items() if dirs.get(p) == direction
            for b in bits if isinstance(b, int)]


def _cell_arcs(kind: str, ins: list, outs: list):
    """``(input bit, output bit, cell delay, route)`` arcs of a combinational cell (route
    ``None``: the default route)."""
    for p, b in outs:
        for q, a in ins:
            if kind == "CCU2C":
                if p == "COUT":
                    yield a, b, (CARRY_CHAIN if q == "CIN" else CARRY_OUT), (0.0 if q == "CIN"
                                                                             else None)
                elif not (p == "S0" and q[-1] == "1"):
                    yield a, b, (CARRY_IN_SUM if q == "CIN" else CARRY_SUM), (0.0 if q == "CIN"
                                                                              else None)
            else:
                yield a, b, DELAYS[kind], (0.05 if kind in _SLICE_MUXES else None)


def _graph(module: dict):
    """Arcs, sources (bit -> arrival) and sinks (bit -> [(cell, pin, setup)]) of a module."""
    arcs, sources, sinks = collections.defaultdict(list), {}, collections.defaultdict(list)
    for name, cell in module["cells"].items():
        kind = cell["type"].split("\\")[-1]
        ins, outs = _pins(cell, "input"), _pins(cell, "output")
        if kind in ("TRELLIS_FF", "DP16KD"):
            sources.update((b, FF_CLOCK if kind == "TRELLIS_FF" else BRAM_CLOCK) for _, b in outs)
            for p, b in ins:
                if not p.startswith("CLK"):
                    sinks[b].append((name, p, SETUP))
        elif kind == "TRELLIS_DPR16X4":     # a LUT RAM: written on the clock, read through
            for p, b in ins:
                if p != "RAD" and p != "WCK":
                    sinks[b].append((name, p, SETUP))
            for a, b, d, r in _cell_arcs(kind, [(p, b) for p, b in ins if p == "RAD"], outs):
                arcs[a].append((b, d, r))
        elif kind in DELAYS or kind == "CCU2C":
            for a, b, d, r in _cell_arcs(kind, ins, outs):
                arcs[a].append((b, d, r))
        elif not kind.startswith("$scopeinfo"):
            sources.update((b, 0.0) for _, b in outs)      # a black box: a clean start
    for name, port in module["ports"].items():
        for b in port["bits"]:
            if isinstance(b, int):
                if port["direction"] == "input":
                    sources[b] = 0.0
                else:
                    sinks[b].append(("<port>", name, 0.0))
    return arcs, sources, sinks


def depth(netlist: dict, module: str | None = None) -> Depth:
    """The model's arrival at every net bit of ``module`` (the netlist's largest by default)
    and its endpoints, latest first."""
    mods = netlist["modules"]
    if module is None:
        module = max(mods, key=lambda k: len(mods[k].get("cells", {})))
    if module not in mods:
        raise ValueError(f"no module {module!r} in the netlist; it has {sorted(mods)}")
    mod = mods[module]
    arcs, sources, sinks = _graph(mod)
    fanout = collections.Counter(a for a, lst in arcs.items() for _ in lst)
    waiting = collections.Counter(b for lst in arcs.values() for b, _, _ in lst)
    out = Depth(_names(mod), {}, {})
    ready = [b for b in set(sources) | set(arcs) if waiting[b] == 0]
    for b in ready:
        out.arrival.setdefault(b, sources.get(b, 0.0))
    while ready:
        a = ready.pop()
        route = ROUTE + 0.1 * (fanout[a] > 8) + 0.1 * (fanout[a] > 64)
        for b, delay, own in arcs[a]:
            t = out.arrival[a] + (route if own is None else own) + delay
            if t > out.arrival.get(b, -1.0):
                out.arrival[b], out.prev[b] = t, a
            waiting[b] -= 1
            if waiting[b] == 0:
                ready.append(b)
    out.ends = sorted(((out.arrival[b] + ROUTE + setup, b, cell, pin)
                       for b, lst in sinks.items() if b in out.arrival
                       for cell, pin, setup in lst), reverse=True)
    return out


def report(d: Depth, over: float = 10.0, paths: int = 12) -> str:
    """A histogram of the endpoints by whole ns, the path groups (start, end) whose paths are
    longer than ``over`` ns with their counts, and the latest path of the first ``paths``."""
    hist = collections.Counter(int(t) for t, *_ in d.ends)
    lines = [f"{len(d.ends):,} endpoints; by ns: "
             + ", ".join(f"{k}: {v:,}" for k, v in sorted(hist.items())),
             f"path groups (start -> end) over {over:g} ns:"]
    groups = collections.Counter()
    for t, b, _, _ in d.ends:
        if t > over:
            groups[(d.group(d.path(b)[0]), d.group(b))] += 1
    lines += [f"  {n:6,}  {a}  ->  {b}" for (a, b), n in groups.most_common(40)]
    shown = set()
    for t, b, cell, pin in d.ends:
        chain = d.path(b)
        key = (d.group(chain[0]), d.group(b))
        if key in shown:
            continue
        shown.add(key)
        lines += ["", f"{t:.2f} ns to {cell} {pin}:"]
        lines += [f"  {d.arrival[x]:6.2f}  {d.names.get(x, x)}"[:160] for x in chain]
        if len(shown) >= paths:
            break
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synth.depth", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("netlist", help="a synth_ecp5 -json netlist (net.json)")
    parser.add_argument("--module", help="the module (default: the one with the most cells)")
    parser.add_argument("--paths", type=int, default=12, help="path groups to print (12)")
    parser.add_argument("--over", type=float, default=10.0, help="count paths over this (ns)")
    args = parser.parse_args(argv)
    try:
        netlist = json.loads(Path(args.netlist).read_text())
        print(report(depth(netlist, args.module), args.over, args.paths))
    except (OSError, ValueError, KeyError) as exc:
        print(f"synth.depth: {args.netlist}: not a readable Yosys JSON netlist with that "
              f"module ({exc})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
