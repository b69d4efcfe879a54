"""``memwall board run``: a block on a board (or on the simulated board top), checked bit-exact.

The host program, :func:`check`, is one function for both transports: it streams the block's
golden vectors (:mod:`memwall.board.vectors`) through a :class:`~memwall.board.host.HarnessHost`,
compares what the block gave with what the golden model predicts, and measures the cycles per
item from the captured cycle stamps. On hardware the host speaks to the board's serial port
(pyserial) after openFPGALoader has programmed the bitstream that ``memwall board build`` wrote;
with ``--sim`` it speaks to :class:`~hdl.board.top.BoardTop` under Verilator, its ``rx``/``tx``
pins driven by cocotbext-uart (``cocotb_tests/board_tb.py``, built by
:func:`cocotb_tests.launcher.run_board`).

Bad input (an unknown block or board, a block without vectors, a missing openFPGALoader,
bitstream or serial port) raises :class:`~memwall.params.ParameterError`: one line, exit
status 2.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from amaranth.hdl import UnusedElaboratable

from hdl.board.frame import Status
from hdl.board.harness import MAX_DEPTH

from .. import registry
from ..params import ParameterError
from .boards import BOARDS, Board, UnknownBoard, board, default_folder
from .host import BoardError, HarnessHost
from .vectors import Vectors, covered, vectors

__all__ = ["SIM_DIVISOR", "SIM_CLOCK_NS", "LOADER", "HarnessSettings",
           "Mismatch", "Report", "check", "cycle_limit", "sim_settings", "add_run_parser",
           "cmd_run"]

#: UART clock cycles per bit of the simulated board: the smallest the UART takes, so that a
#: byte costs 40 cycles of simulation.
SIM_DIVISOR = 4
#: The simulated board's clock period.
SIM_CLOCK_NS = 10
#: The programmer ``run`` looks for on PATH (Debian's ``openfpgaloader``).
LOADER = "openFPGALoader"
#: Mismatches a report lists (all of them are counted).
SHOWN_MISMATCHES = 5
#: How long a serial read waits, and how long the port may take to come back after programming
#: (on the ULX3S and iCEBreaker JTAG and UART share one FTDI chip, whose serial device goes away
#: while openFPGALoader holds it).
READ_TIMEOUT_S, PORT_RETURN_S = 0.05, 5.0
#: Longest a programming may take (an ECP5-85's bitstream over JTAG takes seconds).
PROGRAM_TIMEOUT_S = 300


@dataclass(frozen=True)
class HarnessSettings:
    """The harness a board top was built with: what the host needs to speak to it."""

    stimulus_depth: int = 1024
    capture_depth: int = 1024
    max_length: int = 255
    baud: int = 115200
    #: The block's clock on the board (``board.json``'s ``clock_mhz``); 0: not known.
    clock_mhz: float = 0.0

    @classmethod
    def from_build(cls, folder: Path) -> "HarnessSettings":
        """The settings ``memwall board build`` recorded in ``folder/board.json`` (its keys of
        the same names, at the top or under ``harness``); the defaults for any missing."""
        record = folder / "board.json"
        if not record.exists():
            return cls()
        try:
            data = json.loads(record.read_text())
            data = {**data, **data.get("harness", {})}
            # Field types are strings here (postponed annotations): "int" or "float".
            kinds = {"int": int, "float": float}
            return cls(**{k: kinds[f.type](data[k])
                          for k, f in cls.__dataclass_fields__.items() if k in data})
        except (ValueError, TypeError, AttributeError) as exc:
            raise ParameterError(f"{record} is not a board record of `memwall board build` "
                                 f"({exc})") from None


@dataclass(frozen=True)
class Mismatch:
    """One output item that differs from the golden model's (``got`` None: it never came)."""

    stream: str
    index: int
    expected: int
    got: int | None


@dataclass
class Report:
    """What a run gave, against the golden model."""

    block: str
    items: dict[str, int]                   # expected items per source
    captured: dict[str, int]
    mismatches: int
    first: list[Mismatch]
    end: str
    run_cycles: int
    cycles_per_item: dict[str, float | None] = field(default_factory=dict)
    #: How the setup run (:attr:`Vectors.setup`) ended, with any output it gave; "" for none.
    setup: str = ""
    setup_cycles: int = 0

    @property
    def passed(self) -> bool:
        return self.mismatches == 0 and self.end == Status.OK.name and \
            self.items == self.captured and self.setup in ("", Status.OK.name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "Report":
        data = json.loads(text)
        data["first"] = [Mismatch(**m) for m in data["first"]]
        return cls(**data)

    def lines(self, clock_mhz: float = 0.0) -> list[str]:
        """The report as ``memwall board run`` prints it; with the board's clock, the run's
        time and each stream's time per item too."""
        total = sum(self.items.values())
        verdict = "bit-exact" if self.passed else f"{self.mismatches} mismatch(es)"
        at = f" ({self.run_cycles / clock_mhz:.2f} us at {clock_mhz:g} MHz)" if clock_mhz else ""
        out = [f"{self.block}: {total} output item(s), {verdict} against the golden model; run "
               f"ended {self.end} after {self.run_cycles} cycles{at}"]
        for stream, n in self.items.items():
            rate = self.cycles_per_item.get(stream)
            rate_text = f"{rate:.3f} cycles per item" if rate is not None else "one item"
            if rate is not None and clock_mhz:
                rate_text += f", {1000 * rate / clock_mhz:.2f} ns per item"
            out.append(f"  {stream}: {self.captured.get(stream, 0)} of {n} captured, {rate_text}")
        if self.setup:
            out.append(f"  setup run (loads into the block's memories): ended {self.setup} "
                       f"after {self.setup_cycles} cycles")
        for m in self.first:
            got = "nothing" if m.got is None else f"0x{m.got:x}"
            out.append(f"  mismatch {m.stream}[{m.index}]: expected 0x{m.expected:x}, got {got}")
        return out


def cycle_limit(v: Vectors) -> int:
    """A run's cycle limit: generous for any block that takes and gives an item in at most a
    hundred cycles, so that a block that stops is found without holding the board long."""
    return 10_000 + 100 * sum(len(x) for x in (*v.setup.values(), *v.stimulus.values(),
                                               *v.expected.values()))


def check(host: HarnessHost, v: Vectors, *, name: str, limit: int | None = None) -> Report:
    """The host program: load ``v``'s stimulus, run, read back, compare bit-exact, measure.

    Cycles per item of a source: from the cycle stamps of its first and last item (the block's
    own rate at the board's clock, UART time excluded); ``None`` for a single item. With
    ``v.setup``, a first run plays it and must end ``OK`` with no output (else the report
    fails, saying so); the second run, measured, plays ``v.stimulus``.
    """
    limit = cycle_limit(v) if limit is None else limit
    setup, setup_cycles = "", 0
    if v.setup:
        record = host.execute(v.setup, {}, limit).record
        extra = sum(record.captured.values())
        setup = record.end.name + (f" with {extra} output(s)" if extra else "")
        setup_cycles = record.cycles
    expect = {s: len(items) for s, items in v.expected.items()}
    capture = host.execute(v.stimulus, expect, limit)
    first, count, rates = [], 0, {}
    for stream, want in v.expected.items():
        got = capture.items.get(stream, [])
        for k, value in enumerate(want):
            item = got[k] if k < len(got) else None
            if item != value:
                count += 1
                if len(first) < SHOWN_MISMATCHES:
                    first.append(Mismatch(stream, k, value, item))
        stamps = capture.cycles.get(stream, [])
        rates[stream] = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else None
    record = capture.record
    return Report(name, expect, dict(record.captured), count, first, record.end.name, record.cycles,
                  rates, setup, setup_cycles)


def sim_settings(v: Vectors) -> HarnessSettings:
    """The simulated board's harness: memories just deep enough for ``v`` (a power of two, so
    that runs of similar sizes share a Verilator build)."""
    def depth(lists):
        items = max(len(x) for x in lists)
        if items > MAX_DEPTH:
            raise ParameterError(f"{items} items on one stream exceed the harness's largest "
                                 f"memory of {MAX_DEPTH}; ask for fewer --vectors")
        return 1 << max(2, (items - 1).bit_length())
    return HarnessSettings(stimulus_depth=depth([*v.setup.values(), *v.stimulus.values()]),
                           capture_depth=depth(v.expected.values()),
                           baud=round(1e9 / (SIM_CLOCK_NS * SIM_DIVISOR)))


# -- the command ----------------------------------------------------------------------------

def _design(args):
    entry = registry.get(args.block)
    if entry.name not in covered():
        raise ParameterError(f"no board vectors for block {entry.name}; `memwall board run` "
                             f"takes {', '.join(covered())}")
    overrides = {}
    for pair in args.set or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ParameterError(f"--set takes NAME=VALUE, not {pair!r}")
        overrides[name.strip()] = value.strip()
    params = entry.parameters(args.preset, overrides)
    if args.vectors < 1:
        raise ParameterError(f"--vectors must be at least 1, not {args.vectors}")
    return entry, params


def _sim(args, entry, params) -> int:
    from cocotb_tests.launcher import SimulationError, run_board

    with warnings.catch_warnings():     # the block is built for its layouts only
        warnings.simplefilter("ignore", UnusedElaboratable)
        v = vectors(entry, params, args.vectors, args.seed)
        gc.collect()
    try:
        report, folder = run_board(entry.name, params, count=args.vectors, seed=args.seed,
                                   settings=sim_settings(v))
    except SimulationError as exc:
        print(f"memwall: {exc}", file=sys.stderr, flush=True)
        return 1
    for line in report.lines():
        print(line)
    print(f"simulated: BoardTop under Verilator, UART divisor {SIM_DIVISOR} at "
          f"{SIM_CLOCK_NS} ns (log: {folder / 'board.log'})")
    return 0 if report.passed else 1


def _bitstream(path: Path) -> Path:
    """The bitstream file: ``path`` itself, or the one ``.bit``/``.bin`` in the folder."""
    if path.is_file():
        return path
    found = sorted(path.glob("*.bit")) + sorted(path.glob("*.bin")) if path.is_dir() else []
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise ParameterError(f"--bitstream {path}: {what} bitstream (.bit or .bin) found; build "
                             f"one with `memwall board build`")
    return found[0]


def _loader() -> str:
    loader = shutil.which(LOADER)
    if loader is None:
        raise ParameterError(f"{LOADER} not found on PATH (Debian: apt install openfpgaloader); "
                             f"or check the block without a board: memwall board run --sim")
    return loader


def _program(board: Board, bitstream: Path) -> None:
    try:
        done = subprocess.run([_loader(), "--board", board.loader, str(bitstream)],
                              capture_output=True, text=True, timeout=PROGRAM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ParameterError(f"{LOADER} did not finish programming the {board.name} within "
                             f"{PROGRAM_TIMEOUT_S} s") from None
    if done.returncode:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise ParameterError(f"{LOADER} could not program the {board.name} (is it connected?): "
                             f"{last}")


def _open_port(port: str, baud: int):
    import serial

    deadline = time.monotonic() + PORT_RETURN_S
    while True:
        try:
            return serial.serial_for_url(port, baudrate=baud, timeout=READ_TIMEOUT_S)
        except (serial.SerialException, ValueError) as exc:
            if time.monotonic() > deadline:
                raise ParameterError(f"cannot open serial port {port}: {exc}") from None
            time.sleep(0.2)


def _hardware(args, entry, params) -> int:
    from hdl.board import Harness

    if args.board is None or args.port is None:
        raise ParameterError("memwall board run needs --board and --port, or --sim")
    try:
        target = board(args.board)
    except UnknownBoard as exc:
        raise ParameterError(str(exc)) from None
    if "://" not in args.port and not os.path.exists(args.port):
        raise ParameterError(f"serial port {args.port} does not exist (is the board plugged in?)")
    if not args.no_program:
        _loader()
    folder = Path(args.bitstream or default_folder(target.name, entry.name))
    bitstream = None if args.no_program else _bitstream(folder)
    settings = HarnessSettings.from_build(folder if folder.is_dir() else folder.parent)
    settings = HarnessSettings(**{**asdict(settings), **({"baud": args.baud} if args.baud else {})})
    try:
        harness = Harness(entry.board_component(params),
                          stimulus_depth=settings.stimulus_depth,
                          capture_depth=settings.capture_depth)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"the board record in {folder}: {exc}") from None
    v = vectors(entry, params, args.vectors, args.seed, harness.block)
    _fits(v, settings)
    if bitstream is not None:
        _program(target, bitstream)
    port = _open_port(args.port, settings.baud)
    try:
        port.reset_input_buffer()
        host = HarnessHost(harness, port.write,
                           lambda: port.read(port.in_waiting or 1),
                           max_payload=settings.max_length,
                           patience=round(10 / READ_TIMEOUT_S))
        report = check(host, v, name=entry.name)
    except (BoardError, TimeoutError) as exc:
        print(f"memwall: the board on {args.port} failed the run: {exc}", file=sys.stderr,
              flush=True)
        return 1
    finally:
        port.close()
    for line in report.lines(settings.clock_mhz):
        print(line)
    return 0 if report.passed else 1


def _fits(v: Vectors, settings: HarnessSettings) -> None:
    for kind, lists, depth in (("stimulus", [*v.setup.items(), *v.stimulus.items()],
                                settings.stimulus_depth),
                               ("capture", v.expected.items(), settings.capture_depth)):
        for stream, items in lists:
            if len(items) > depth:
                raise ParameterError(f"{len(items)} items of {stream} exceed the board's "
                                     f"{kind} memory of {depth}; ask for fewer --vectors")


def cmd_run(args) -> int:
    """``memwall board run``: program, stream, compare, report (exit 1 on a mismatch)."""
    entry, params = _design(args)
    return _sim(args, entry, params) if args.sim else _hardware(args, entry, params)


def add_run_parser(subparsers):
    """Add ``run`` to the ``memwall board`` sub-command group ``subparsers``."""
    p = subparsers.add_parser("run", help="run a block on a board (or its simulation) against "
                                          "its golden model, bit-exact, and measure cycles per "
                                          "item")
    p.add_argument("block", help=f"registered block with board vectors: {', '.join(covered())}")
    p.add_argument("--board", help=f"the board: {', '.join(BOARDS)}")
    p.add_argument("--port", help="its serial port (/dev/ttyUSB0, or a pyserial URL)")
    p.add_argument("--preset", default="small",
                   help=f"parameter preset: {', '.join(registry.PRESETS)} (default: small)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="override one parameter (repeatable; tuples comma-separated)")
    p.add_argument("--vectors", type=int, default=64, metavar="N",
                   help="items per input stream (commands, for a block that answers a command "
                        "with many items; GEMVs for rdxe-vac; tokens of the reduced layer for "
                        "rdxe-dxe) (default: 64)")
    p.add_argument("--seed", type=int, default=1, help="seed of the random vectors (default: 1)")
    p.add_argument("--bitstream", metavar="PATH",
                   help="the bitstream, or the `memwall board build` output folder holding it "
                        "and board.json (default: build/board/BOARD/BLOCK)")
    p.add_argument("--baud", type=int, help="serial bit rate (default: board.json's, else 115200)")
    p.add_argument("--no-program", action="store_true",
                   help="the board is programmed already: do not run openFPGALoader")
    p.add_argument("--sim", action="store_true",
                   help="run the same host program against the board top under Verilator, its "
                        "serial pins driven by cocotbext-uart: no board, port or programmer")
    p.set_defaults(func=cmd_run)
    return p
