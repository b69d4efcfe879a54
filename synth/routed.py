"""Every failing path of a routed ECP5 design, from nextpnr's SDF: where the routes cross the die.

nextpnr names one critical path a run. A design that fails by its routes (the placer spreading a
full die) fails on hundreds of paths, a different one each seed, so fixing the printed path one
placement at a time does not converge. ``memwall synth --sdf`` (or ``nextpnr-ecp5 --sdf F``)
writes the routed delays of every cell arc and every route; this module times every
register-to-register path from them (nextpnr's own numbers: the slowest corner of each triple,
a register's setup from its ``SETUPHOLD``) and reports

- the endpoints by slack, and the path groups (start unit -> end unit) that fail, with counts;
- the worst path of each failing group, route by route;
- the long routes on failing paths, by the signal that drives them: the nets to register, copy
  or move, since a register copy beside far loads or a pipeline stage on a crossing is what
  shortens a route.

::

    python -m synth.routed routed_seed1.sdf [--period 10] [--paths 12] [--route 2.0]

The worst path equals nextpnr's printed critical path (tests/test_synth_routed.py checks it on
a routed block).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Timing", "parse", "analyse", "signal", "report", "main"]

_CELL = re.compile(r'\(CELLTYPE "([^"]+)"\)')
_INSTANCE = re.compile(r"\(INSTANCE\s*([^)]*)\)")
_IOPATH = re.compile(r"\(IOPATH \(?(?:posedge |negedge )?(\S+?)\)? (\S+) "
                     r"\(([-\d.]+):([-\d.]+):([-\d.]+)\)")
_CHECK = re.compile(r"\(SETUPHOLD \((?:posedge|negedge) (\S+)\) \((?:posedge|negedge) (\S+)\) "
                    r"\(([-\d.]+):([-\d.]+):([-\d.]+)\)")
_ROUTE = re.compile(r"\(INTERCONNECT (\S+) (\S+) \(([-\d.]+):([-\d.]+):([-\d.]+)\)")
#: Yosys's and nextpnr's suffixes on a mapped cell's name: what follows is not the signal's.
_MAPPED = re.compile(r"(_TRELLIS_FF|_LUT4|_CCU2C|_PFUMX|_L6MUX21|_MULT18X18D|_DP16KD|"
                     r"_TRELLIS_DPR16X4|\$|_DPR16X4).*$")


@dataclass
class Timing:
    """Arrival (ps) at every pin, the edge it came by, and each endpoint's required time."""

    arrival: dict = field(default_factory=dict)      # pin -> ps
    prev: dict = field(default_factory=dict)         # pin -> (pin, ps of the arc, "route"|"cell")
    setup: dict = field(default_factory=dict)        # endpoint pin -> setup ps
    starts: set = field(default_factory=set)         # pins a clock launches

    def path(self, pin: str) -> list:
        """``(pin, arrival ps, arc ps, kind)`` from the launching pin to ``pin``."""
        out = []
        while pin is not None:
            before = self.prev.get(pin)
            out.append((pin, self.arrival[pin], before[1] if before else self.arrival[pin],
                        before[2] if before else "clock"))
            pin = before[0] if before else None
        return out[::-1]

    def ends(self, period: float) -> list:
        """``(slack ps, endpoint pin)`` of every timed endpoint, worst first."""
        return sorted((period - self.arrival[p] - s, p) for p, s in self.setup.items()
                      if p in self.arrival)


def _ps(triple) -> float:
    return float(triple[-1])     # nextpnr times by the slowest corner


def _unescape(name: str) -> str:
    return name.replace("\\", "")


def parse(text: str):
    """The SDF's cell arcs ``{in pin: [(out pin, ps)]}``, launches ``{out pin: ps}``, setups
    ``{pin: ps}`` and routes ``{driver pin: [(sink pin, ps)]}``."""
    arcs, launch, setup = collections.defaultdict(list), {}, {}
    routes = collections.defaultdict(list)
    instance = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("(INTERCONNECT"):
            m = _ROUTE.match(line)
            if m:
                routes[_unescape(m[1])].append((_unescape(m[2]), _ps(m.groups()[2:])))
        elif line.startswith("(INSTANCE"):
            instance = _unescape(_INSTANCE.match(line)[1].strip())
        elif line.startswith("(IOPATH"):
            m = _IOPATH.match(line)
            src, dst, ps = f"{instance}/{m[1]}", f"{instance}/{m[2]}", _ps(m.groups()[2:])
            if m[1].startswith("CLK") or m[1] == "WCK":
                launch[dst] = max(launch.get(dst, 0.0), ps)
            else:
                arcs[src].append((dst, ps))
        elif line.startswith("(SETUPHOLD"):
            m = _CHECK.match(line)
            pin = f"{instance}/{m[1]}"
            setup[pin] = max(setup.get(pin, 0.0), _ps(m.groups()[2:]))
    return arcs, launch, setup, routes


def analyse(text: str) -> Timing:
    """Arrival at every pin reached from a launch, latest path kept (the graph is acyclic: a
    routed design's combinational loops are refused by nextpnr)."""
    arcs, launch, setup, routes = parse(text)
    edges = collections.defaultdict(list)
    for src, lst in arcs.items():
        edges[src] += [(d, ps, "cell") for d, ps in lst]
    for src, lst in routes.items():
        edges[src] += [(d, ps, "route") for d, ps in lst]
    waiting = collections.Counter(d for lst in edges.values() for d, _, _ in lst)
    t = Timing(setup=setup, starts=set(launch))
    t.arrival.update(launch)
    ready = [p for p in set(edges) | set(launch) if waiting[p] == 0]
    while ready:        # constants and undriven pins launch nothing: no arrival, as in nextpnr
        p = ready.pop()
        for d, ps, kind in edges.get(p, ()):
            at = t.arrival.get(p, float("-inf")) + ps
            if p in t.arrival and at > t.arrival.get(d, -1.0):
                t.arrival[d], t.prev[d] = at, (p, ps, kind)
            waiting[d] -= 1
            if waiting[d] == 0:
                ready.append(d)
    return t


def signal(pin: str, levels: int | None = None) -> str:
    """The RTL signal a mapped cell's pin belongs to (``wrap_dut.a.b.x_TRELLIS_FF_Q_2/Q`` ->
    ``a.b.x``), or its first ``levels`` hierarchy levels."""
    name = pin.rsplit("/", 1)[0]
    name = name[len("wrap_dut."):] if name.startswith("wrap_dut.") else name
    name = _MAPPED.sub("", name) or name
    return ".".join(name.split(".")[:levels]) if levels else name


def report(t: Timing, period_ns: float = 10.0, paths: int = 12, route_ns: float = 2.0,
           levels: int = 3) -> str:
    """Slack histogram, failing path groups, their worst paths and the long routes on them."""
    period = period_ns * 1000
    ends = t.ends(period)
    failing = [(s, p) for s, p in ends if s < 0]
    worst = -ends[0][0] + period if ends else 0.0
    hist = collections.Counter(int(s // 1000) for s, _ in ends)
    lines = [f"{len(ends):,} endpoints, {len(failing):,} failing at {period_ns:g} ns; worst "
             f"{worst / 1000:.2f} ns ({1e6 / worst if worst else 0:.1f} MHz)",
             "slack by whole ns: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(hist.items())),
             f"failing path groups (start -> end, {levels} levels):"]
    groups, heads, crossings = collections.Counter(), {}, collections.defaultdict(list)
    for s, p in failing:
        chain = t.path(p)
        key = (signal(chain[0][0], levels), signal(p, levels))
        groups[key] += 1
        heads.setdefault(key, (s, chain))
        for (driver, *_), (_, _, ps, kind) in zip(chain, chain[1:]):
            if kind == "route" and ps >= route_ns * 1000:
                crossings[signal(driver)].append(ps)
    lines += [f"  {n:6,}  worst {heads[k][0] / 1000:6.2f}  {k[0]}  ->  {k[1]}"
              for k, n in groups.most_common(40)]
    lines += ["", f"routes of {route_ns:g} ns or more on failing paths, by driving signal "
              "(paths through them, longest ns):"]
    lines += [f"  {len(v):6,}  {max(v) / 1000:5.2f}  {k}"
              for k, v in sorted(crossings.items(), key=lambda kv: -len(kv[1]))[:40]]
    for key, _ in groups.most_common(paths):
        s, chain = heads[key]
        lines += ["", f"{key[0]} -> {key[1]}: slack {s / 1000:.2f} ns"]
        lines += [f"  {at / 1000:6.2f} {ps / 1000:+5.2f} {kind:5s} {_short(pin)}"[:170]
                  for pin, at, ps, kind in chain]
    return "\n".join(lines)


def _short(pin: str) -> str:
    return pin[len("wrap_dut."):] if pin.startswith("wrap_dut.") else pin


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synth.routed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("sdf", help="nextpnr's routed SDF (memwall synth --sdf)")
    parser.add_argument("--period", type=float, default=10.0, help="clock period, ns (10)")
    parser.add_argument("--paths", type=int, default=12, help="worst paths to print (12)")
    parser.add_argument("--route", type=float, default=2.0,
                        help="list routes at least this long on failing paths, ns (2)")
    parser.add_argument("--levels", type=int, default=3, help="hierarchy levels of a group (3)")
    args = parser.parse_args(argv)
    if args.period <= 0 or args.paths < 0 or args.route < 0 or args.levels < 1:
        print("synth.routed: --period and --route must be positive, --paths 0 or more, "
              "--levels 1 or more", file=sys.stderr)
        return 2
    try:
        text = Path(args.sdf).read_text()
        if "(DELAYFILE" not in text[:200]:
            raise ValueError("no DELAYFILE header")
        timing = analyse(text)
    except (OSError, ValueError, UnicodeDecodeError, TypeError) as exc:
        print(f"synth.routed: {args.sdf}: not a readable SDF file ({exc})", file=sys.stderr)
        return 2
    print(report(timing, args.period, args.paths, args.route, args.levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
