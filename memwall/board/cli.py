"""`memwall board ...`: the board commands (`list`, `build`, `run`), one sub-command group that
:mod:`memwall.cli` hooks in with :func:`add_parser` (docs/boards.md)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from memwall import registry

from .boards import (BOARDS, LUTS_PER_CELL, UnknownBoard, board, default_folder, fit,
                     harness_memories, measuring)
from .build import BAUD, DEPTH, MARGIN, BoardBuildError, build, check

__all__ = ["add_parser", "cmd_list", "cmd_build"]


def _cli():
    from memwall import cli     # imported when a command runs: memwall.cli imports this module
    return cli


def _board(name: str):
    try:
        return board(name)
    except UnknownBoard as exc:
        raise _cli().UsageError(str(exc)) from None


def cmd_list(args) -> int:
    print("| board | device | package | oscillator | UART (resource, USB bridge) | PLL | "
          "amaranth-boards platform |")
    print("|---|---|---|---:|---|---|---|")
    for b in BOARDS.values():
        bridge = b.bridge if b.usb_uart else "pins only: add a USB serial adapter"
        pll = "EHXPLLL" if b.family == "ecp5" else "SB_PLL40_PAD"
        print(f"| {b.name} | {b.device} | {b.package} | {b.clock_mhz:g} MHz ({b.clock}) | "
              f"`{b.uart}` on {bridge} | {pll} | `{b.platform}` |")
    blocks = [registry.get(args.block)] if args.block else registry.blocks()
    print(f"\nWhat fits where: the presets of each block that fit each board, from the "
          f"registry's size estimate (`memwall list BLOCK`) checked as the size guard checks "
          f"it: memory bits, plus the harness's memories at depth {args.depth} in whole block "
          f"RAMs, against the device's block RAM bits; multipliers against its multiplier "
          f"blocks; netlist cells against its LUT4s / {LUTS_PER_CELL}. An estimate: "
          f"`memwall board build` places the design, and nextpnr's utilisation is the last "
          f"word.")
    print("| block | " + " | ".join(BOARDS) + " |")
    print("|---|" + "---|" * len(BOARDS))
    reasons, undecided = {}, False
    with measuring():
        memories = {(block.name, preset): harness_memories(block, params, args.depth)
                    for block in blocks for preset, params in block.presets.items()}
    for block in blocks:
        cells = []
        for b in BOARDS.values():
            fits = []
            for preset, params in block.presets.items():
                over = fit(b, block, params, args.depth, memories[block.name, preset])
                if not over:
                    fits.append(preset)
                elif not fit(b, block, params, args.depth, memories[block.name, preset],
                             tolerance=registry.SIZE_TOLERANCE):
                    fits.append(f"{preset}?")
                    undecided = True
                if over and (block.name, b.name) not in reasons:
                    reasons[block.name, b.name] = f"{preset}: {'; '.join(over)}"
            cells.append(", ".join(fits) or "–")
        print(f"| {block.name} | " + " | ".join(cells) + " |")
    if undecided:
        print(f"\n`?`: over the device on the estimate's multipliers or netlist cells, by less "
              f"than the estimate's own tolerance (x{registry.SIZE_TOLERANCE:g}; its memory bits "
              f"fit): only a placement tells (`memwall board build`, which refuses on memory "
              f"bits only, takes it).")
    if args.verbose:
        print("\nWhy not (the first preset that does not fit):")
        for (name, b), why in reasons.items():
            print(f"- {name} on {b}: {why}")
    return 0


def _clock(value: str) -> float:
    try:
        mhz = float(value)
    except ValueError:
        mhz = math.nan
    if not math.isfinite(mhz) or mhz <= 0:
        raise _cli().UsageError(f"--clock takes a positive number of MHz, not {value!r}")
    return mhz


def _depth(value: str) -> int:
    from hdl.board.harness import MAX_DEPTH
    if not value.isdigit() or not 1 <= int(value) <= MAX_DEPTH:
        raise _cli().UsageError(f"--depth takes items per stream from 1 to {MAX_DEPTH}, "
                                f"not {value!r}")
    return int(value)


def _baud(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise _cli().UsageError(f"--baud takes a positive whole number of bits per second, "
                                f"not {value!r}")
    return int(value)


def _table(record: dict) -> str:
    cols = ("board", "device", "clock (MHz)", "Fmax (MHz)", "timing", "LUTs", "FFs", "DSPs",
            "BRAMs", "bitstream")
    row = (record["board"], record["device"], f"{record['clock_mhz']:g}",
           f"{record['fmax_mhz']:.1f}", "met" if record["timing_met"] else "MISSED",
           *(str(record[k]) for k in ("luts", "ffs", "dsps", "brams")), record["bitstream"])
    return ("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n| "
            + " | ".join(row) + " |\n")


def cmd_build(args) -> int:
    from synth.toolchain import ToolNotFound

    from memwall.output import Staged

    cli = _cli()
    target = _board(args.board)
    clock = None if args.clock is None else _clock(args.clock)
    block, params = cli._design(args)
    with measuring():
        memories = harness_memories(block, params, args.depth)
    if isinstance(memories, str):
        raise cli.UsageError(f"{block.name} cannot go on a board: {memories}")
    over = fit(target, block, params, args.depth, memories, memory_only=True)
    if over and not args.force:
        raise cli.UsageError(f"{block.name} ({args.preset}) does not fit {target.name} "
                             f"({target.device}): {over[0]} of block RAM, with the harness's "
                             f"memories at --depth {args.depth}")
    try:
        check(target, clock, args.baud)
    except (BoardBuildError, ToolNotFound) as exc:
        raise cli.UsageError(str(exc)) from None
    staged = Staged(args.output or default_folder(target.name, block.name))
    try:
        with staged as stage:
            record = build(block, params, target, stage, clock_mhz=clock, baud=args.baud,
                           depth=args.depth, progress=lambda s: cli._status(f"  {s}"))
            built = Path(record["bitstream"])
            bitstream = stage / f"{block.top}{target.bitstream_suffix}"
            os.replace(built, bitstream)
            record.update(preset=args.preset, overrides=cli._overrides(args.set),
                          bitstream=str(staged.final(bitstream)))
            (stage / "board.json").write_text(json.dumps(record, indent=2) + "\n")
    except (BoardBuildError, ToolNotFound) as exc:
        raise cli.UsageError(str(exc)) from None
    print(_table(record), end="")
    cli._status(f"wrote {record['bitstream']} and {staged.final(stage / 'board.json')} "
                f"(clock: {record['clock_chosen']}; {record['seconds']:.0f} s)")
    return 0


def add_parser(sub, design_args, parser_class) -> None:
    """Add the ``board`` group to the sub-parsers ``sub`` of memwall's parser (``design_args``:
    its block, ``--preset``, ``--set``, ``-o`` and ``--force`` arguments; ``parser_class``: its
    parser class, which makes a usage mistake one line)."""
    group = sub.add_parser("board", help="FPGA boards: what fits where, bitstreams") \
        .add_subparsers(dest="board_command", required=True, metavar="COMMAND",
                        parser_class=parser_class)
    depth_help = (f"items per stream of the harness's stimulus and capture memories "
                  f"(default: {DEPTH})")
    p = group.add_parser("list", help="the boards, and which blocks and presets fit each")
    p.add_argument("block", nargs="?", help="only this block")
    p.add_argument("--depth", type=_depth, default=DEPTH, help=depth_help)
    p.add_argument("-v", "--verbose", action="store_true", help="say why each block does not fit")
    p.set_defaults(func=cmd_list)
    p = group.add_parser("build", help="a block's bitstream for a board, and board.json")
    design_args(p, None)
    p.add_argument("--board", required=True, help=f"one of {', '.join(BOARDS)}")
    p.add_argument("--clock", metavar="MHZ",
                   help=f"the block's clock (default: the highest a PLL makes at or below "
                        f"{MARGIN * 100:.0f} %% of the Fmax of a first placement at the "
                        f"oscillator's)")
    p.add_argument("--baud", type=_baud, default=BAUD,
                   help=f"host link bit rate (default: {BAUD})")
    p.add_argument("--depth", type=_depth, default=DEPTH, help=depth_help)
    p.set_defaults(func=cmd_build)
    from .run import add_run_parser
    add_run_parser(group)
