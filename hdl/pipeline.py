"""Stream plumbing shared by every memwall block: delays, pipeline cuts, stream stages, skid
buffers, result queues and head queues.

Two kinds of piece live here, each with its contract (ports or arguments, latency, what it
assumes of its neighbours) in its docstring; docs/pipeline.md says which to reach for.

* **Components** (``wiring.Component``, one submodule each, tested on their own in
  ``tests/test_pipeline.py``): :class:`SkidBuffer` (a stream cut with every output a register),
  :class:`DelayLine` (an always-ready stream delayed by a fixed count), :class:`ResultQueue`
  (the FIFO and credit count behind an always-ready pipeline) and :class:`HeadQueue` (a queue
  whose head is a register).
* **Builders**, which add registers to the caller's module because they cut or shadow the
  caller's own logic rather than sit between two streams: :func:`delay` (a register chain
  inside a datapath), :class:`Pipeline` with :func:`cut_order` (registers at a unit's chosen cut
  points), :func:`stream_stage` (a function of the payload between two streams),
  :func:`next_values` (a register's next value), :func:`shared` (one expression named once)
  and :func:`distinct_copies` and :func:`control_copies` (copies of a register, of a control
  bit, that synthesis keeps apart).

Every register here is in the ``sync`` domain. Data registers have no reset (they are qualified
by a valid bit, which has one).
"""

from __future__ import annotations

from typing import Sequence

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .validate import integer

__all__ = ["delay", "shared", "next_values", "distinct_copies", "control_copies",
           "one_hot_select", "Pipeline", "cut_order", "stream_stage", "ResultQueue",
           "queued_pipeline", "fifo_ready", "SkidBuffer", "SkidQueue", "DelayLine", "HeadQueue"]


def delay(m: Module, value: Value, cycles: int, *, name: str = "delay", reset: bool = False) \
        -> Value:
    """Return ``value`` delayed by ``cycles`` register stages (``cycles = 0``: ``value`` itself).

    Data registers have no reset (a pipelined unit's data is qualified by its valid bit); pass
    ``reset=True`` for a valid bit.
    """
    for index in range(cycles):
        stage = Signal.like(value, name=f"{name}_{index}", reset_less=not reset)
        m.d.sync += stage.eq(value)
        value = stage
    return value


def shared(m: Module, value, name: str):
    """Return a combinational signal named ``name`` driven by ``value``.

    Later logic that uses ``value`` several times then shares one expression instead of copying
    it into every use (a chain of such uses otherwise grows exponentially). Adds one ``comb``
    assignment to ``m``; no register, latency 0.
    """
    if isinstance(value, data.View):
        signal = Signal(value.shape(), name=name)
    else:
        value = Value.cast(value)
        signal = Signal(value.shape(), name=name)
    m.d.comb += signal.eq(value)
    return signal


def next_values(m: Module, *registers: Signal) -> list[Signal]:
    """Assign ``registers`` through their next values: one combinational ``<name>_next`` signal
    per register, equal to the register unless the design assigns it (``m.d.comb``), which the
    register takes at the clock edge. Logic that must know next cycle's state now (a ``ready``
    computed a cycle ahead, so that it can come from a register) reads these."""
    nexts = []
    for reg in registers:
        nxt = Signal.like(reg, name=f"{reg.name}_next")
        m.d.comb += nxt.eq(reg)
        m.d.sync += reg.eq(nxt)
        nexts.append(nxt)
    return nexts


def distinct_copies(m: Module, sources: Sequence[Value], count: int, *, name: str) -> list[Signal]:
    """Register ``count`` copies of a value that synthesis keeps as separate flip-flops.

    ``sources`` are equal values held in distinct registers (or one value). Copy ``j`` registers
    ``sources[(j // 2) % len(sources)]`` with power-on value 0 for even ``j`` and all ones for
    odd ``j``: Yosys's ``opt_merge`` merges flip-flops only when their inputs *and* initial
    values agree, so up to ``2 * len(sources)`` copies stay apart (beyond that they pair up
    again). Each copy can then sit beside its own load, typically one DSP, instead of one
    register fanning out across the die. The power-on value has no meaning: the copies are
    pipeline data, qualified by a valid bit like every register of :class:`Pipeline`.

    Latency one cycle. Returns the registers.
    """
    sources = [Value.cast(v) for v in sources]
    if not sources:
        raise ValueError("distinct_copies needs at least one source")
    copies = []
    for j in range(count):
        value = sources[(j // 2) % len(sources)]
        init = (1 << len(value)) - 1 if j % 2 else 0
        reg = Signal(len(value), name=f"{name}_{j}", reset_less=True, init=init)
        m.d.sync += reg.eq(value)
        copies.append(reg)
    return copies


def control_copies(m: Module, value: Value, count: int, *, name: str) -> list[Value]:
    """Register ``count`` copies of a control bit (a valid, a select) that synthesis keeps as
    two flip-flops, each reset to 0.

    :func:`distinct_copies` keeps data copies apart by their power-on values, which a control
    bit cannot spare: copy ``j`` here holds ``value`` for even ``j`` and its inverse for odd
    ``j`` (read back inverted), so that the two registers differ in input and Yosys's
    ``opt_merge`` keeps them; each can then sit beside its own loads. Latency one cycle.
    Returns the copies (as read: each equals ``value`` a cycle late).
    """
    value = Value.cast(value)
    if len(value) != 1:
        raise ValueError(f"control_copies copies one bit, not {len(value)}")
    copies = []
    for j in range(count):
        odd = j % 2
        reg = Signal(name=f"{name}_{j}", init=odd)
        m.d.sync += reg.eq(value ^ odd)
        copies.append(reg ^ odd if odd else reg)
    return copies


def one_hot_select(choices: Sequence[tuple[Value, Value]]) -> Value:
    """The value of the ``(select, value)`` pair whose select is high, 0 when none is.

    The selects must be exclusive (a one-hot register's bits): each bit is then an AND-OR of the
    pairs, where an ``If``/``Elif`` chain builds a priority decode whose terms (``~a & ~b & c``)
    fan out to every bit it selects. Unsigned values are zero-extended to the widest.
    """
    if not choices:
        raise ValueError("one_hot_select needs at least one choice")
    result = Value.cast(0)
    for select, value in choices:
        result = result | Mux(select, value, 0)
    return result


class Pipeline:
    """Place the registers of a fully pipelined datapath at chosen cut points.

    A unit writes its datapath once, as combinational steps separated by ``cut`` calls. The first
    ``stages - 1`` indices of ``order`` become registers; the output (``output``) is always
    registered, so the latency is ``stages`` cycles and a new input is accepted every cycle.

    Parameters
    ----------
    m : Module
    valid : Value
        The input valid bit; it travels with the data through the same registers.
    cuts : int
        Number of cut points the datapath offers.
    stages : int
        Register stages (latency), 1 to ``cuts + 1``.
    order : sequence of int
        Cut indices in the order they become registers as ``stages`` grows (each index once);
        default: spread evenly.
    """

    def __init__(self, m: Module, valid, *, cuts: int, stages: int,
                 order: Sequence[int] | None = None):
        self.m = m
        self.valid = Value.cast(valid)
        if order is None:
            order = spread(cuts)
        if sorted(order) != list(range(cuts)):
            raise ValueError(f"Cut order must list each of the {cuts} cut indices once, "
                             f"not {list(order)}")
        self._registered = set(order[:stages - 1])
        self._next = 0
        self.cuts = cuts
        # Each register made here by id, with its power-on value: carried to the next register
        # of the same value (below).
        self._inits: dict[int, tuple[Value, int]] = {}

    def registered(self, index: int) -> bool:
        """Whether cut point ``index`` is a register."""
        return index in self._registered

    def cut(self, *values, inits: Sequence[int] | None = None):
        """Mark the next cut point; return ``values`` (registered there if chosen).

        ``inits`` optionally gives each value's power-on value when it is registered (default
        0, or the power-on value of the register of an earlier cut when the value is that
        register). Pipeline registers carry no meaning before their first valid input, so this
        changes no result; registers that copy the same value with different power-on values
        stay separate cells in synthesis (Yosys ``opt_merge`` merges flip-flops only when their
        inputs *and* initial values agree), which is how :func:`distinct_copies` works. A bit
        whose input is a constant should power on at that constant: synthesis then drops its
        flip-flop, where one powering on otherwise is kept and merged with every other such one
        of the design into one flip-flop of a large fan-out (an operand's hidden bit).
        """
        index = self._next
        self._next += 1
        if index >= self.cuts:
            raise ValueError(f"datapath has more cut points than the {self.cuts} declared")
        if inits is not None and len(inits) != len(values):
            raise ValueError(f"Cut {index} got {len(values)} values but {len(inits)} initial "
                             f"values")
        if index not in self._registered:
            # Still a signal (combinational): later steps use these values several times.
            out = [shared(self.m, value, f"c{index}_{n}") for n, value in enumerate(values)]
            return out if len(out) != 1 else out[0]
        out = self._register(values, inits or [None] * len(values))
        return out if len(out) != 1 else out[0]

    def init_of(self, value) -> int:
        """The power-on value of ``value`` when it is a register of an earlier cut, else 0."""
        known = self._inits.get(id(value))
        return known[1] if known is not None and known[0] is value else 0

    def _register(self, values, inits):
        valid = Signal(name=f"valid_{self._next}")
        self.m.d.sync += valid.eq(self.valid)
        self.valid = valid
        out = []
        for n, (value, init) in enumerate(zip(values, inits)):
            if not isinstance(value, data.View):
                value = Value.cast(value)
            if init is None:
                init = self.init_of(value)
            shape = value.shape()
            kw = {"init": init} if init else {}
            reg = Signal(shape, name=f"p{self._next}_{n}", reset_less=True, **kw)
            self.m.d.sync += reg.eq(value)
            self._inits[id(reg)] = (reg, init)
            out.append(reg)
        return out

    def output(self, sink, payload):
        """Register ``payload`` (a Value or dict of field values) into the stream ``sink``: its
        valid through a register with a reset, its payload through one without."""
        if self._next != self.cuts:
            raise ValueError(f"datapath passed {self._next} of its {self.cuts} cut points")
        self.m.d.sync += sink.valid.eq(self.valid)
        # The payload's register has no reset: the block's reset would otherwise fan out to every
        # data flip-flop of the output (FusedDQP's seed-1 path, docs/flowkv.md 10.9).
        reg = Signal.like(sink.payload, name=f"p{self._next}_out", reset_less=True)
        self.m.d.comb += sink.payload.eq(reg)
        if isinstance(payload, dict):
            for name, value in payload.items():
                self.m.d.sync += reg[name].eq(value)
        else:
            self.m.d.sync += reg.eq(payload)


def cut_order(default: Sequence[int], stages: int, cuts: Sequence[int] | None,
              unit: str) -> tuple[int, ...]:
    """Return the :class:`Pipeline` order of a unit: ``default``, or ``cuts`` registered first.

    ``cuts`` (``None`` for the default) lists the ``stages - 1`` cut points to register; the
    other cut points follow in the default order. Raises ``TypeError`` / ``ValueError`` naming
    ``unit`` for a ``cuts`` that is not such a list.
    """
    if cuts is None:
        return tuple(default)
    count = len(default)
    if isinstance(cuts, (str, bytes)) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in cuts):
        raise TypeError(f"{unit} cuts must be a sequence of cut indices, not {cuts!r}")
    cuts = tuple(cuts)
    if len(set(cuts)) != len(cuts) or any(not 0 <= c < count for c in cuts) \
            or len(cuts) != stages - 1:
        raise ValueError(f"{unit} cuts must be {stages - 1} distinct cut indices between 0 and "
                         f"{count - 1} (stages - 1), not {list(cuts)}")
    return cuts + tuple(c for c in default if c not in cuts)


def spread(cuts: int) -> list[int]:
    """Cut indices ordered so that each prefix is spread roughly evenly over the datapath."""
    order: list[int] = []
    for n in range(1, cuts + 1):
        chosen = {((i + 1) * (cuts + 1)) // (n + 1) - 1 for i in range(n)}
        for index in sorted(chosen):
            if index not in order:
                order.append(index)
        for index in range(cuts):
            if len(order) >= n:
                break
            if index not in order:
                order.append(index)
    return order[:cuts]


def stream_stage(m: Module, source, sink, payload: Value, *, registered: bool = True,
                 valid_copy: bool = False):
    """Connect ``source`` to ``sink`` through a function of the payload, honouring back-pressure.

    Parameters
    ----------
    m : Module
        Module to add the logic to (``sync`` domain for the register).
    source : stream interface (flipped; ``valid``/``payload`` in, ``ready`` out)
        The stage's input.
    sink : stream interface (``valid``/``payload`` out, ``ready`` in)
        The stage's output.
    payload : Value
        The output payload, computed combinationally from ``source.payload``.
    registered : bool
        ``True``: one register stage (latency 1, one transfer per cycle under any back-pressure:
        the input is ready whenever the output register is empty or being drained).
        ``False``: combinational (latency 0; ``ready`` passes straight through).
    valid_copy : bool
        With ``registered``: the stage decides to advance from a flip-flop of its own that
        holds the output's emptiness (``~sink.valid``, kept apart by synthesis), so that the
        producer's side of the decision need not reach the output register, which the placer
        may put beside a distant consumer (docs/rdxe.md 14.4, round 13). Same handshake.
    """
    if registered:
        if valid_copy:
            empty = Signal(init=1, name="stage_empty")
            advance = sink.ready | empty
            with m.If(advance):
                m.d.sync += empty.eq(~source.valid)
        else:
            advance = sink.ready | ~sink.valid
        with m.If(advance):
            m.d.sync += [sink.valid.eq(source.valid), sink.payload.eq(payload)]
        m.d.comb += source.ready.eq(advance)
    else:
        m.d.comb += [sink.valid.eq(source.valid), sink.payload.eq(payload),
                     source.ready.eq(sink.ready)]


class ResultQueue(wiring.Component):
    """Queue the results of an always-ready pipeline and drain them into a stream, with a credit
    per place.

    A pipelined unit (:mod:`hdl.arith`) cannot stall, so an item may enter it only if its result
    will have a place to land. The queue keeps a credit count: ``depth`` free places less the
    items already in flight or queued. Drive ``issue`` when an item enters the pipeline (only
    while ``can_issue``), and ``w`` when its result comes out. With ``depth`` at least
    :meth:`full_rate_depth` of the pipeline's latency (the latency plus 3: two cycles from ``w``
    to ``o.valid``, one for a returned credit to reach the ``can_issue`` register) the queue
    never limits a full-rate producer whose consumer is always ready; one place fewer loses a
    cycle in every ``depth + 1``.

    Parameters
    ----------
    shape : shape-castable
        The result shape.
    depth : int
        FIFO places, 3 to 4096. (The FIFO is ``SyncFIFOBuffered``: an output register in front
        of a ``depth - 1`` FIFO. At ``depth = 2`` that inner FIFO has one place, and a result
        written the cycle after another into an empty queue finds it full while its first result
        moves to the output register: it would be lost although a credit allowed it.)
    lut_ram : bool
        Ask synthesis for the FIFO's memory in LUT RAM (``ram_style`` ``distributed``): its
        read register is then a flip-flop, where a block RAM's output without its register
        comes 5.6 ns after the clock on the ECP5. Default ``False``: the tool's choice. The
        same cycles either way.

    Members
    -------
    can_issue : Out(1, init=1)
        A credit is available: an item may enter the pipeline this cycle. A register (its
        value every cycle equals ``credits != 0`` as long as ``issue`` is driven only while
        ``can_issue``), so the producer's issue logic starts from a flip-flop.
    issue : In(1)
        An item enters the pipeline this cycle (takes a credit).
    cancel : In(1)
        An item that took a credit will write no result after all: its credit comes back. A
        producer that must take the credit before it knows whether the item answers (a
        ``ready`` from registers) gives it back with this once it knows. Never more often than
        credits were taken and not yet returned or written.
    w : In(stream.Signature(shape, always_ready=True))
        A result, written the cycle ``w.valid`` is high; only results of issued items.
    o : Out(stream.Signature(shape))
        The results in order, from the FIFO's output register: two cycles from ``w`` into an
        empty queue to ``o.valid``. A result taken from ``o`` returns its credit.

    A bad ``depth`` raises ``TypeError``/``ValueError`` naming it.
    """

    #: Cycles from a result written on ``w`` into an empty queue to ``o.valid``
    #: (``SyncFIFOBuffered``'s output register).
    LATENCY = 2
    #: Places a full-rate producer needs beyond its pipeline's latency: a place's round trip,
    #: the queue's :attr:`LATENCY` and one cycle for a returned credit to reach ``can_issue``.
    CREDIT_LOOP = LATENCY + 1

    def __init__(self, shape, depth: int, *, lut_ram: bool = False):
        self.depth = integer(depth, "Result queue depth", 3, 4096)
        if not isinstance(lut_ram, bool):
            raise TypeError(f"Result queue lut_ram must be True or False, not {lut_ram!r}")
        self.lut_ram = lut_ram
        super().__init__({"can_issue": Out(1, init=1), "issue": In(1), "cancel": In(1),
                          "w": In(stream.Signature(shape, always_ready=True)),
                          "o": Out(stream.Signature(shape))})

    @classmethod
    def full_rate_depth(cls, latency: int) -> int:
        """The fewest places that keep a pipeline of ``latency`` cycles at one item a cycle."""
        return latency + cls.CREDIT_LOOP

    def elaborate(self, platform):
        m = Module()
        depth, o = self.depth, self.o
        fifo_class = _LutRamFifo if self.lut_ram else SyncFIFOBuffered
        m.submodules.fifo = fifo = fifo_class(width=len(Value.cast(self.w.payload)), depth=depth)
        credits = Signal(range(depth + 1), init=depth)
        popped = o.valid & o.ready
        returned = popped + self.cancel            # credits back this cycle: 0, 1 or 2
        m.d.sync += credits.eq(credits - self.issue + returned)
        # Its next value is chosen by ``issue`` and the returns among tests of the present count:
        # the producer's issue logic then starts from a flip-flop, not from a comparison of the
        # counter.
        m.d.sync += self.can_issue.eq(Mux(self.issue & (returned == 0), credits > 1,
                                          (credits != 0) | (returned > self.issue)))
        m.d.comb += [fifo.w_en.eq(self.w.valid), fifo.w_data.eq(self.w.payload),
                     o.valid.eq(fifo.r_rdy), o.payload.eq(fifo.r_data), fifo.r_en.eq(o.ready)]
        return m


def fifo_ready(m: Module, fifo, name: str = "fifo_ready") -> Signal:
    """A flip-flop equal in every cycle to ``fifo.r_rdy`` of an Amaranth ``SyncFIFO`` (whose
    ``r_rdy`` is ``level != 0``): a consumer's ``valid`` then leaves a register of its own, not
    a compare of the level across the die. Its next value comes from the FIFO's ``w_en``,
    ``r_en`` and ``level`` as the FIFO's own level does."""
    written = fifo.w_en & fifo.w_rdy
    read = fifo.r_en & fifo.r_rdy
    ready = Signal(name=name)
    m.d.sync += ready.eq(written | (ready & ~(read & (fifo.level == 1))))
    return ready


class _LutRamFifo(SyncFIFOBuffered):
    """``SyncFIFOBuffered`` whose memory carries ``ram_style = "distributed"`` (LUT RAM)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs["ram_style"] = "distributed"     # depth >= 3: it has one
        return m


def queued_pipeline(m: Module, i, o, shape, latency: int, *, name: str = "queue",
                    lut_ram: bool = False):
    """Gate stream ``i`` into an always-ready pipeline of ``latency`` cycles whose results leave
    on stream ``o`` through a :class:`ResultQueue` of :meth:`~ResultQueue.full_rate_depth`
    places (a component's own ``i`` and ``o`` members, from inside its ``elaborate``; ``lut_ram``
    the queue's).

    ``i.ready`` is the queue's ``can_issue`` register. Returns ``(go, queue)``: ``go`` is high
    in the cycle a beat of ``i`` enters the pipeline; the pipeline's results go into
    ``queue.w``, ``latency`` cycles later."""
    m.submodules[name] = queue = ResultQueue(shape, ResultQueue.full_rate_depth(latency),
                                             lut_ram=lut_ram)
    wiring.connect(m, queue.o, wiring.flipped(o))
    go = Signal(name=f"{name}_go")
    m.d.comb += [go.eq(i.valid & queue.can_issue), i.ready.eq(queue.can_issue),
                 queue.issue.eq(go)]
    return go, queue


class SkidBuffer(wiring.Component):
    """Pass a stream through two registers so that no path crosses it, in either direction.

    A register stage (:func:`stream_stage`) still passes ``o.ready`` combinationally to
    ``i.ready``. A skid buffer cuts that path as well: ``i.ready`` is a flip-flop, and so are
    ``o.valid`` and ``o.payload``. When ``o`` stalls, the item accepted in that cycle waits in
    a second register (the skid) and ``i.ready`` drops the cycle after.

    Parameters
    ----------
    shape : shape-castable
        The payload shape.

    Members
    -------
    i : In(stream.Signature(shape))
        Input; ``i.ready`` is a register (high while the skid register is empty).
    o : Out(stream.Signature(shape))
        Output, in order; ``o.valid`` and ``o.payload`` are registers, and ``o.valid`` never
        depends on ``o.ready`` in the same cycle.

    Latency one cycle; one item per cycle under any pattern of ``o.ready`` that is high at
    least as often as items arrive; nothing is dropped or duplicated.

    ``ready_copy=True`` drives ``i.ready`` from a flip-flop of its own, equal in every cycle to
    the skid register's emptiness (stored apart, so that synthesis keeps two): the producer's
    decision to send then starts at a register the placer can put beside the producer, while
    the skid's own flag stays beside the output registers it selects (docs/rdxe.md 14.4, round
    13). The handshake is the same in every cycle.
    """

    def __init__(self, shape, *, ready_copy: bool = False):
        self.ready_copy = bool(ready_copy)
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        skid = Signal.like(i.payload, name="held")
        skid_valid = Signal()
        if self.ready_copy:
            # The skid's next state, registered twice: as itself and, inverted, as i.ready.
            taking = Signal(init=1, name="taking")
            drain, fill = o.ready | ~o.valid, i.valid & ~skid_valid
            m.d.sync += taking.eq(Mux(drain, 1, Mux(fill, 0, taking)))
            m.d.comb += i.ready.eq(taking)
        else:
            m.d.comb += i.ready.eq(~skid_valid)
        # The skid register follows the input while it is empty: its enable is a flip-flop
        # (not the output's ready), and what it holds is read only once skid_valid is set.
        with m.If(~skid_valid):
            m.d.sync += skid.eq(i.payload)
        with m.If(o.ready | ~o.valid):
            # The output register is free: it takes the skid's item first, else the input's.
            with m.If(skid_valid):
                m.d.sync += [o.valid.eq(1), o.payload.eq(skid), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [o.valid.eq(i.valid), o.payload.eq(i.payload)]
        with m.Elif(i.valid & ~skid_valid):
            m.d.sync += skid_valid.eq(1)
        return m


class SkidQueue(SkidBuffer):
    """A :class:`SkidBuffer`'s handshake, cycle for cycle, from two places written by the input
    side alone.

    A skid buffer's output register loads when the consumer takes (``o.ready``): in a wide
    payload that decision drives the enable of every bit. Here the items wait in two places,
    each written only when an item arrives for it; ``o.ready`` moves the read pointer and the
    two state flip-flops, and ``o.payload`` is the place the pointer names (one mux after
    registers). Parameters (``ready_copy`` too) and members as :class:`SkidBuffer`'s, but
    ``o.payload`` is a choice between two registers; ``i.ready``, ``o.valid`` and ``o.payload``
    equal a skid buffer's in every cycle under the same inputs (tests/test_pipeline.py).
    """

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        places = [Signal.like(i.payload, name=f"place{k}") for k in range(2)]
        full = Signal()
        write, read = i.valid & ~full, o.valid & o.ready
        count = o.valid + full + write - read
        # Each pointer in two flip-flops that synthesis keeps apart (one holds the inverse),
        # each driving half the payload: the write pointer one place's enables each, the read
        # pointer half the output's bits each.
        to_one, to_zero = Signal(name="at_write"), Signal(name="at_write_n", init=1)
        from_one, from_zero = Signal(name="at_read"), Signal(name="at_read_n", init=1)
        m.d.sync += [o.valid.eq(count != 0), full.eq(count == 2),
                     to_one.eq(to_one ^ write), to_zero.eq(to_zero ^ write),
                     from_one.eq(from_one ^ read), from_zero.eq(from_zero ^ read)]
        flat = [Value.cast(p) for p in places]
        half = len(flat[0]) // 2
        if self.ready_copy:
            free = Signal(init=1, name="taking")
            m.d.sync += free.eq(count != 2)
            m.d.comb += i.ready.eq(free)
        else:
            m.d.comb += i.ready.eq(~full)
        m.d.comb += [o.payload.eq(Cat(Mux(from_zero, flat[0][:half], flat[1][:half]),
                                      Mux(from_one, flat[1][half:], flat[0][half:])))]
        with m.If(write & to_one):
            m.d.sync += places[1].eq(i.payload)
        with m.If(write & to_zero):
            m.d.sync += places[0].eq(i.payload)
        return m


class DelayLine(wiring.Component):
    """Delay an always-ready stream by a fixed number of register stages.

    Parameters
    ----------
    shape : shape-castable
        The payload shape.
    cycles : int
        Register stages, 1 to 4096: the latency.

    Members
    -------
    i : In(stream.Signature(shape, always_ready=True))
        Input; taken every cycle (no back-pressure).
    o : Out(stream.Signature(shape, always_ready=True))
        ``i`` exactly ``cycles`` cycles later: ``o.valid`` from registers with a reset (no item
        comes out of reset), ``o.payload`` from reset-less registers (qualified by ``valid``).

    One item per cycle, in order; nothing is dropped. Assumes its consumer takes every item
    (``o`` has no ``ready``). A bad ``cycles`` raises ``TypeError``/``ValueError`` naming it.
    """

    def __init__(self, shape, cycles: int):
        self.cycles = integer(cycles, "Delay line length", 1, 4096)
        super().__init__({"i": In(stream.Signature(shape, always_ready=True)),
                          "o": Out(stream.Signature(shape, always_ready=True))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.valid.eq(delay(m, self.i.valid, self.cycles, name="valid",
                                           reset=True)),
                     self.o.payload.eq(delay(m, Value.cast(self.i.payload), self.cycles,
                                             name="payload"))]
        return m


class HeadQueue(wiring.Component):
    """Queue items that arrive without back-pressure; keep the oldest in a register of its own.

    What reads the head (a multiplier, a broadcast to many lanes) then starts from a flip-flop,
    not from the queue's RAM. ``depth`` places in all: the head register and a circular store of
    ``depth - 1`` behind it (distributed RAM, read asynchronously). An item written at cycle
    ``t`` into an empty queue is the head at ``t + 1``, exactly like a plain register; behind
    other items it waits its turn.

    Parameters
    ----------
    shape : shape-castable
        The item shape (a ``data.StructLayout`` gives ``o.payload`` its fields).
    depth : int
        Places, 2 to 4096, the head included.

    Members
    -------
    w : In(stream.Signature(shape, always_ready=True))
        Writes: an item every cycle ``w.valid`` is high. There is no ``ready``: the writer
        keeps to its own bound on what it sends (credits); a write that finds every place
        taken is dropped and raises ``lost``.
    o : Out(stream.Signature(shape))
        The head: ``o.valid`` and ``o.payload`` are registers. ``o.ready`` takes the head in a
        cycle ``o.valid`` is high (in other cycles it has no effect), and the next item is the
        head the cycle after.
    lost : Out(1)
        Combinational: this cycle's write found no place and is dropped. A writer that never
        has more than ``depth`` items unread never raises it.
    copy : Signal or None
        With ``copy=True``: a second head register, equal to ``o.payload`` in every cycle but
        kept apart by synthesis (power-on value all ones), for a far load such as a multiplier
        block's operands, so that it can sit beside that load.

    Latency one cycle from ``w`` into an empty queue to ``o``; one item per cycle in and out,
    in order. The storage's write enable and ``lost`` come from ``w.valid`` and the queue's own
    registers, never from ``o.ready``: a reader's late decision reaches only the pointers and
    the head register. A bad ``depth`` raises ``TypeError``/``ValueError`` naming it.
    """

    def __init__(self, shape, depth: int, *, copy: bool = False):
        self.depth = integer(depth, "Head queue depth", 2, 4096)
        if not isinstance(copy, bool):
            raise TypeError(f"Head queue copy must be True or False, not {copy!r}")
        super().__init__({"w": In(stream.Signature(shape, always_ready=True)),
                          "o": Out(stream.Signature(shape)),
                          "lost": Out(1)})
        self.copy = None
        if copy:
            width = len(Value.cast(self.o.payload))
            # All ones at power-on: Yosys merges flip-flops whose inputs and initial values agree.
            reg = Signal(width, name="head_copy", init=(1 << width) - 1)
            self.copy = data.View(shape, reg) if isinstance(shape, data.Layout) else reg

    def elaborate(self, platform):
        m = Module()
        w, o = self.w, self.o
        places = self.depth - 1                    # behind the head register
        m.submodules.storage = storage = Memory(shape=len(Value.cast(w.payload)), depth=places,
                                                init=[])
        wr = storage.write_port()
        rd = storage.read_port(domain="comb")
        produce, consume = Signal(range(places)), Signal(range(places))
        level = Signal(range(places + 1))
        empty, full = level == 0, level == places
        load = ~o.valid | o.ready                  # the head register takes the next item
        # Every write with a place goes into the store, even one the head register takes at
        # once (the store then passes it on in the same cycle): what the reader decides late
        # moves only ``consume``, the level's last choice and the head register.
        push = w.valid & ~full
        pop = load & (~empty | w.valid)
        kept = Signal.like(level)
        m.d.comb += [wr.en.eq(push), wr.addr.eq(produce), wr.data.eq(w.payload),
                     rd.addr.eq(consume), self.lost.eq(w.valid & full), kept.eq(level + push)]
        with m.If(push):
            m.d.sync += produce.eq(Mux(produce == places - 1, 0, produce + 1))
        with m.If(pop):
            m.d.sync += consume.eq(Mux(consume == places - 1, 0, consume + 1))
        m.d.sync += level.eq(Mux(pop, kept - 1, kept))
        with m.If(load):
            head = Mux(empty, w.payload, rd.data)
            m.d.sync += [o.valid.eq(~empty | w.valid), o.payload.eq(head)]
            if self.copy is not None:
                m.d.sync += Value.cast(self.copy).eq(head)
        return m
