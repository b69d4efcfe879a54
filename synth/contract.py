"""Check the stream contract of any component with SymbiYosys (:func:`synth.formal.prove`).

:class:`StreamContract` wraps a :class:`amaranth.lib.wiring.Component` and walks its signature:

* every ``In`` stream (the component is its sink) gets free ``valid`` and ``payload`` each cycle
  (``AnySeq``), under the *assumed* source side of the contract: once ``valid`` is high it stays
  high, with the same payload, until ``ready``;
* every ``Out`` stream (the component is its source) gets a free ``ready`` (none when the stream
  is ``always_ready``: its ``ready`` is a constant 1), and the harness *asserts* the component's
  side: once ``valid`` is high it stays high, with the same payload, until ``ready``;
* every other input port is free (``AnySeq``); output ports are left alone.

``fixed`` pins an input (``"hlink_o.ready"``, ``"rc.valid"``, a plain port's name) to a constant
where a block's contract needs it (say why at the call). On top of the handshake, relations state
what a block defines between its streams: :class:`Delay` (an always-ready pipeline: every input
comes out ``latency`` cycles later and nothing else does) and :class:`Answers` (nothing comes out
that no input caused; an occupancy bound; a credit rule the environment keeps). ``never`` names
output ports that must stay 0 (an ``overrun`` flag).

Reset: ``rst`` is a free input of the proof (:mod:`synth.formal`), so the solver may reset the
design in any cycle. Every register of the harness is reset with it, so the checks that look one
cycle back are off in the cycle after a reset (the output may then legitimately drop its ``valid``,
and the environment its offer).

After :meth:`StreamContract.elaborate`, ``past[name]`` holds each stream's previous-cycle
``valid``, ``ready``, ``payload`` and ``fire`` (transfer) as registers and ``checked`` is high
unless the previous cycle was a reset: a subclass adds block-specific assertions with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from amaranth import Const, Elaboratable, Module, Signal, Value
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring

# The walker lives with the components (the board harness uses it too); named here as before.
from hdl.ports import Port, ports_of

__all__ = ["Port", "ports_of", "Past", "Delay", "Answers", "StreamContract"]

@dataclass(frozen=True)
class Past:
    """A stream's values in the previous cycle (registers of the harness, cleared by reset)."""

    valid: Signal
    ready: Signal
    payload: Signal
    fire: Signal


def _fire(interface) -> Value:
    return interface.valid & interface.ready


def _ident(name: str) -> str:
    """A signal name for a port path (``o.0`` -> ``o__0``)."""
    return name.replace(".", "__")


@dataclass(frozen=True)
class Delay:
    """An always-ready pipeline: ``o.valid`` is ``i.valid`` of ``latency`` cycles before.

    Every accepted input comes out exactly ``latency`` cycles later and nothing else comes out.
    Checked from ``latency`` cycles after a reset on (before, the pipeline may still hold items
    from before the reset, or have dropped them).
    """

    i: str
    o: str
    latency: int

    def add(self, m: Module, harness: "StreamContract") -> None:
        i, o = harness.stream(self.i, "sink"), harness.stream(self.o, "source")
        for name, interface in ((self.i, i), (self.o, o)):
            if not isinstance(Value.cast(interface.ready), Const):
                raise ValueError(f"Delay needs always-ready streams, and {name} has a ready")
        line = Value.cast(i.valid)
        for k in range(self.latency):
            # Not reset: the pipeline's own stages need not be either (checked after `latency`).
            stage = Signal(name=f"{_ident(self.i)}_valid_{k + 1}", reset_less=True)
            m.d.sync += stage.eq(line)
            line = stage
        since = Signal(range(self.latency + 1), name=f"{_ident(self.o)}_since_reset")
        with m.If(since != self.latency):
            m.d.sync += since.eq(since + 1)
        with m.If(since == self.latency):
            m.d.comb += Assert(o.valid == line, f"{self.o}: valid is {self.i}.valid "
                                                f"{self.latency} cycles before")


@dataclass(frozen=True)
class Answers:
    """Each item of ``effect`` answers an item accepted on ``cause``: nothing comes out that no
    input caused.

    The harness counts ``pending``: items accepted on ``cause`` (those where ``cause_when`` of
    the payload holds, all by default) less items taken on ``effect`` (where ``effect_when``
    holds). It asserts that ``effect`` offers a counted item only while ``pending`` is not 0
    or a cause is accepted in the same cycle, so ``pending`` never underflows. The counter is
    ``width`` bits and stops (and the check with it) at its top, which no run shorter than
    ``2**width - 1`` cycles reaches.

    Parameters
    ----------
    most : int or None
        Also assert ``pending <= most``: the block's occupancy bound.
    registered : bool
        The block holds its items only in ``effect``'s output register (a one-stage pipeline):
        assert ``pending == effect.valid``, the occupancy the port shows (this makes the
        counter's proof inductive).
    credits : int or None
        The environment's credit rule, *assumed*: a counted cause is accepted only while
        ``pending < credits``.
    """

    cause: str
    effect: str
    cause_when: Callable[[Value], Value] | None = None
    effect_when: Callable[[Value], Value] | None = None
    most: int | None = None
    registered: bool = False
    credits: int | None = None
    width: int = 8

    def add(self, m: Module, harness: "StreamContract") -> None:
        cause, effect = harness.stream(self.cause, "sink"), harness.stream(self.effect, "source")
        if self.registered and self.effect_when is not None:
            raise ValueError(f"Answers(registered=True) counts every item of {self.effect}, so "
                             f"effect_when must be None, not {self.effect_when!r}")
        counted_cause = _fire(cause) & (1 if self.cause_when is None
                                        else self.cause_when(cause.payload))
        offered = effect.valid & (1 if self.effect_when is None
                                  else self.effect_when(effect.payload))
        pending = Signal(self.width, name=f"{_ident(self.effect)}_pending")
        top = (1 << self.width) - 1
        with m.If(pending != top):
            m.d.sync += pending.eq(pending + counted_cause - (offered & effect.ready))
            m.d.comb += Assert(~offered | (pending != 0) | counted_cause,
                               f"{self.effect}: nothing comes out that {self.cause} did not cause")
            if self.most is not None:
                m.d.comb += Assert(pending <= self.most,
                                   f"{self.effect}: at most {self.most} in flight")
            if self.registered:
                m.d.comb += Assert(pending == effect.valid,
                                   f"{self.effect}: the output register holds what is in flight")
        if self.credits is not None:
            m.d.comb += Assume(~counted_cause | (pending < self.credits))


class StreamContract(Elaboratable):
    """Check the stream contract of ``dut`` (see the module's description).

    Parameters
    ----------
    dut : wiring.Component
    relations : sequence of Delay or Answers
        What the block defines between its streams.
    fixed : mapping of str to int
        Inputs pinned to a constant, by name (``"<stream>.valid"``, ``"<stream>.ready"``,
        ``"<stream>.payload"`` or a plain port).
    never : sequence of str
        Output ports asserted to stay 0.

    Use it with ``synth.formal.prove(harness, [], folder, ...)``: it has no ports of its own.
    """

    def __init__(self, dut: wiring.Component, relations: Sequence = (), *,
                 fixed: Mapping[str, int] | None = None, never: Sequence[str] = ()):
        self.dut = dut
        self.relations = tuple(relations)
        self.fixed = dict(fixed or {})
        self.never = tuple(never)
        self.ports = {port.name: port for port in ports_of(dut)}
        inputs = {"sink": ("valid", "payload"), "source": ("ready",), "input": ("",)}
        known = {f"{p.name}.{s}".rstrip(".") for p in self.ports.values()
                 for s in inputs.get(p.kind, ())}
        unknown = sorted(set(self.fixed) - known)
        if unknown:
            raise ValueError(f"Fixed inputs {', '.join(unknown)} are not inputs of {dut!r}")
        for name in self.never:
            self._port(name, "output")
        self.past: dict[str, Past] = {}
        self.checked = Signal()

    def _port(self, name: str, kind: str) -> Port:
        port = self.ports.get(name)
        if port is None or port.kind != kind:
            have = ", ".join(p.name for p in self.ports.values() if p.kind == kind) or "none"
            raise ValueError(f"{name!r} names no {kind} of {self.dut!r}; its {kind}s: {have}")
        return port

    def stream(self, name: str, kind: str):
        """The stream interface ``name``, which must be a ``kind`` (``sink`` or ``source``)."""
        return self._port(name, kind).value

    def _drive(self, m: Module, name: str, target) -> None:
        """Drive an input from ``fixed`` or with a free value each cycle."""
        target = Value.cast(target)
        if isinstance(target, Const):
            return                                      # an always-ready stream's ready
        value = self.fixed.get(name)
        m.d.comb += target.eq(AnySeq(len(target)) if value is None else value)

    def _remember(self, m: Module, name: str, interface) -> Past:
        payload, base = Value.cast(interface.payload), _ident(name)
        past = Past(valid=Signal(name=f"{base}_was_valid"), ready=Signal(name=f"{base}_was_ready"),
                    payload=Signal(len(payload), name=f"{base}_was_payload"),
                    fire=Signal(name=f"{base}_was_fire"))
        m.d.sync += [past.valid.eq(interface.valid), past.ready.eq(interface.ready),
                     past.payload.eq(payload), past.fire.eq(_fire(interface))]
        self.past[name] = past
        return past

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        m.d.sync += self.checked.eq(1)
        for name, port in self.ports.items():
            if port.kind == "input":
                self._drive(m, name, port.value)
            elif port.kind in ("sink", "source"):
                self._stream(m, name, port)
        for relation in self.relations:
            relation.add(m, self)
        for name in self.never:
            m.d.comb += Assert(Value.cast(self.ports[name].value) == 0, f"{name} stays 0")
        return m

    def _stream(self, m: Module, name: str, port: Port) -> None:
        interface = port.value
        payload = Value.cast(interface.payload)
        stalled_before = Signal(name=f"{_ident(name)}_stalled")
        if port.kind == "sink":
            self._drive(m, f"{name}.valid", interface.valid)
            self._drive(m, f"{name}.payload", payload)
        else:
            self._drive(m, f"{name}.ready", interface.ready)
        past = self._remember(m, name, interface)
        m.d.comb += stalled_before.eq(self.checked & past.valid & ~past.ready)
        if isinstance(Value.cast(interface.ready), Const):
            return                                      # always ready: never stalled
        if port.kind == "sink":
            with m.If(stalled_before):
                m.d.comb += Assume(interface.valid & (payload == past.payload))
        else:
            with m.If(stalled_before):
                m.d.comb += [Assert(interface.valid, f"{name}: valid held until ready"),
                             Assert(payload == past.payload, f"{name}: payload held until taken")]
