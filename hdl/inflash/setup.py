"""The in-flash PE's command set-up: latch a command, size it, check it, start or refuse it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.dsp import ECP5_MULT_WIDTH, ecp5_product, family
from .divider import SerialDivider
from .spec import (IMPLEMENTED_MODES, MAX_KV_HEADS, MAX_LAYERS, MAX_TOKENS, Mapping, Mode, Op,
                   PEConfig, command_layout, job_layout, pe_config)

__all__ = ["CommandSetup", "Path", "plan_layout"]


@dataclass(frozen=True)
class _Widths:
    """Widths of the set-up's arithmetic: the multiplier's operands, the divider, the walk."""

    wide: int           # 2 L H and the entry index c
    div: int            # the serial divider's operands
    mul_a: int
    mul_b: int

    @classmethod
    def of(cls, cfg: PEConfig) -> "_Widths":
        wide = 2 * cfg.layout_bits + 1
        div = max(cfg.tokens_bits, wide, cfg.page_bytes.bit_length(), cfg.cols_bits + 1)
        return cls(wide=wide, div=div,
                   mul_a=max(cfg.rows_bits, div, cfg.page_bits + 1),
                   mul_b=max(cfg.cols_bits + 1, wide, cfg.page_bytes.bit_length(),
                             cfg.query_bits))

    @property
    def product(self) -> int:
        return self.mul_a + self.mul_b


class Path(enum.IntEnum):
    """The arithmetic path of a command (``plan.path``): a command starts on a path when the
    results of the others are out (their latencies differ, and results leave in order)."""

    FLOAT = 0
    INT = 1
    W4 = 2
    LOGIT_FLOAT = 3
    LOGIT_INT = 4
    ATTEND = 5


def plan_layout(cfg: PEConfig) -> data.StructLayout:
    """The set-up's result (:class:`CommandSetup`'s ``plan``): the command's fields and the sizes
    of its page stream, reads and beats.

    ``op``, ``mode``, ``rows``, ``cols``, ``page``, ``tokens``, ``head_dim``, ``heads`` (``G``),
    ``mapping``: the command's. ``entry``: bytes of one K or V entry; ``nb``: beats of an entry,
    ``ceil(d / F)``; ``pb``: ``x`` beats of a token's ``p``, ``ceil(G / F)``; ``last_mask``: the
    lanes of an entry's last beat. ``size``: bytes of a GEMV's page stream; ``total``: bytes of an
    attention command's K or V stream; ``x_beats``: ``x`` beats of an attention command. The
    page walk (docs/inflash.md, section 5): ``page_used``, bytes of a full KV page (``T_p``
    entries); ``stride``, ``S = 2 L H``; ``first_page``; naive mapping: ``first_col`` (byte
    column of the first entry), ``col_step`` (``(S mod T_p)`` entries in bytes) and
    ``page_step`` (``S // T_p``). ``ops``: issues per token of an attention command,
    ``G ceil(d / F)``. Decoded: ``att`` (Logit or Attend), ``logit``, ``attend``, ``int``
    (w8a8, int8 KV), ``w4`` (a w4a16 GEMV), ``path`` (:class:`Path`).
    """
    w = _Widths.of(cfg)
    return data.StructLayout({
        "op": 2, "mode": 2, "rows": cfg.rows_bits, "cols": cfg.cols_bits, "page": cfg.page_bits,
        "tokens": cfg.tokens_bits, "head_dim": cfg.cols_bits, "heads": cfg.query_bits,
        "mapping": 1, "entry": cfg.cols_bits + 1, "nb": cfg.cols_bits, "pb": cfg.query_bits,
        "last_mask": cfg.fmacs, "size": cfg.stream_bits, "total": w.product,
        "x_beats": w.product, "page_used": cfg.page_bytes.bit_length() + 1, "stride": w.wide,
        "first_page": w.product + 1, "first_col": cfg.page_bytes.bit_length(),
        "col_step": cfg.page_bytes.bit_length(),
        "page_step": w.div, "ops": w.product, "att": 1, "logit": 1, "attend": 1, "int": 1,
        "w4": 1, "path": 3})


class CommandSetup(wiring.Component):
    """Take a command, work out its sizes and page walk, check it, then start or refuse it.

    A command is taken (``cmd.ready``) only while ``idle``: the previous command has finished
    with the registers the rest of the PE reads (``plan``). A GEMV is sized with one
    multiplication (``rows cols`` times the bytes per element); an attention command computes
    its page walk (docs/inflash.md, section 5) with a serial divider and one shared multiplier
    whose operands, pieces and product are registers (four cycles a multiply). Then the command is
    checked (the refusal rules of :class:`~hdl.inflash.pe.InflashPE`) and

    * refused: ``refuse`` pulses once the earlier results are out (``drained``, no Attend
      result pending, ``can_refuse``), so that the error word keeps command order;
    * or started: ``job`` offers the gearbox its stream (taken at once: the gearbox is idle
      when a command is taken), and ``gemv_start`` or ``att_start`` pulses in the same cycle. A
      GEMV on another path than the previous one's starts when ``drained`` (w4a16 only: its
      group sums overwrite the previous GEMV's); an Attend when no Attend result is pending.

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        The PE's commands.
    idle : In(1)
        The previous command's beats, reads and ``x`` are all taken (a command may be taken).
    drained : In(1)
        No result is in the arithmetic.
    attend_busy : In(1)
        An Attend's results are not all out (its accumulators are in use).
    can_refuse : In(1)
        The output queue has a place for an error word.
    plan : Out(plan_layout(cfg))
        The current command (registers): valid from its start pulse until the next command
        is taken, which needs ``idle``.
    job : Out(stream.Signature(job_layout(cfg)))
        The gearbox's job: the mode, the shape (attention: ``tokens x head_dim``) and the
        stream length; ``valid`` and ``payload`` registers, with the start.
    gemv_start, att_start : Out(1)
        The GEMV (Logit or Attend) starts this cycle: reads, ``x`` and beats begin. Registers.
    refuse : Out(1)
        The command is refused: one error word enters the output queue this cycle. A
        register.

    Latency: a GEMV starts :attr:`gemv_cycles` cycles after its command is taken, an
    attention command after its divisions (``div`` bits each) and multiplications; the
    refusal rules are worked out into a register before the start is decided, and the start
    (or refusal) pulses come from registers a cycle after that decision.
    """

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "Command set-up")
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "idle": In(1), "drained": In(1), "attend_busy": In(1), "can_refuse": In(1),
            "plan": Out(plan_layout(cfg)),
            "job": Out(stream.Signature(job_layout(cfg))),
            "gemv_start": Out(1), "att_start": Out(1), "refuse": Out(1),
        })

    #: Cycles from a GEMV command taken to its start, with nothing to wait for: the multiply's
    #: four states, the page count, the verdict's register, the check and the start's register.
    gemv_cycles = 8

    def elaborate(self, platform):
        m = Module()
        cfg, p = self.cfg, self.plan
        w = _Widths.of(cfg)
        P = cfg.page_bytes
        self._mul_a, self._mul_b = Signal(w.mul_a), Signal(w.mul_b)
        self._product = self._multiplier(m, platform)
        self._div = SerialDivider(m, w.div, "walk_div")
        self._page_end = Signal(cfg.stream_bits + 1)    # GEMV: page + its page count
        self._layout = {name: Signal(cfg.layout_bits, name=name)
                        for name in ("layers", "kv_heads", "layer", "head")}
        self._walk = {name: Signal(width, name=name) for name, width in (
            ("tp", w.div), ("first_entry", w.wide), ("wraps", w.div),
            ("last_page", w.product + 1), ("slot_step", w.div), ("end_entry", w.product + 1),
            ("limit", w.product))}
        bad = Signal()
        att = p.att
        with m.FSM(name="command"):
            self._latch(m)
            self._states(m)
            with m.State("VERDICT"):
                # The refusal rules into a register: the start below fans out widely.
                m.d.sync += bad.eq(self._bad(m))
                m.next = "CHECK"
            # The decision, then its pulses from registers a cycle later (they fan out over the
            # whole PE); what the decision tested cannot change in between, since nothing runs.
            with m.State("CHECK"):
                with m.If(bad):
                    m.next = "REFUSE"
                with m.Elif(att):
                    # An Attend reuses the accumulators: the previous one's results must be out.
                    with m.If((~p.attend | ~self.attend_busy) & self.job.ready):
                        m.d.sync += [self.att_start.eq(1), self.job.valid.eq(1)]
                        m.next = "GO"
                # w4a16: the group sums X of the previous GEMV must be used up first.
                with m.Elif(((p.mode != Mode.W4A16) | self.drained) & self.job.ready):
                    m.d.sync += [self.gemv_start.eq(1), self.job.valid.eq(1)]
                    m.next = "GO"
            with m.State("REFUSE"):
                # After every earlier result, so that answers keep command order.
                with m.If(self.drained & self.can_refuse & ~self.attend_busy):
                    m.d.sync += self.refuse.eq(1)
                    m.next = "GO"
            with m.State("GO"):
                m.d.sync += [self.gemv_start.eq(0), self.att_start.eq(0), self.refuse.eq(0),
                             self.job.valid.eq(0)]
                m.next = "IDLE"
        # Registers: the plan holds from VERDICT on, so they hold it by the start; the gearbox
        # decodes them into its start state, which must not wait for the plan's wide fan-out.
        m.d.sync += [self.job.payload.mode.eq(p.mode),
                     self.job.payload.rows.eq(Mux(att, p.tokens, p.rows)),
                     self.job.payload.cols.eq(Mux(att, p.head_dim, p.cols)),
                     self.job.payload.bytes.eq(Mux(att, p.total, p.size))]
        return m

    def _bad(self, m):
        """The refusal rules, from the set-up's registers (valid in CHECK)."""
        cfg, p, walk, lay = self.cfg, self.plan, self._walk, self._layout
        log_g = cfg.group_size.bit_length() - 1
        plane_pages = cfg.geometry.pages
        implemented = Cat(p.mode == code for code in IMPLEMENTED_MODES).any()
        gemv_bad = ((p.rows == 0) | (p.rows > cfg.max_rows) | (p.cols == 0)
                    | (p.cols > cfg.max_cols) | ~implemented | (p.op == 3)
                    | ((p.mode == Mode.W4A16) & (p.cols[:log_g] != 0))
                    | (self._page_end > plane_pages))
        fits = Mux(p.mapping == Mapping.PAGE, walk["last_page"] < plane_pages,
                   (p.page < plane_pages) & (walk["end_entry"] < walk["limit"]))
        att_bad = ((p.mode == Mode.W4A16) | (p.tokens == 0) | (p.tokens > MAX_TOKENS)
                   | (p.heads == 0) | (p.heads > cfg.max_query_heads)
                   | (p.head_dim == 0) | (p.head_dim > cfg.max_head_dim)
                   | (p.entry > cfg.page_bytes) | (p.ops > cfg.max_beats)
                   | (lay["layers"] == 0) | (lay["layers"] > MAX_LAYERS) | (lay["kv_heads"] == 0)
                   | (lay["kv_heads"] > MAX_KV_HEADS) | (lay["layer"] >= lay["layers"])
                   | (lay["head"] >= lay["kv_heads"]) | ~fits)
        return Mux(p.att, att_bad, gemv_bad)

    def _latch(self, m):
        """IDLE: take a command into the registers."""
        cfg, p, c, lay = self.cfg, self.plan, self.cmd.payload, self._layout
        F = cfg.fmacs
        log_f = F.bit_length() - 1
        with m.State("IDLE"):
            m.d.comb += self.cmd.ready.eq(self.idle)
            with m.If(self.cmd.valid & self.idle):
                d_m1 = c.head_dim - 1
                m.d.sync += [p.op.eq(c.op), p.mode.eq(c.mode), p.rows.eq(c.rows),
                             p.cols.eq(c.cols), p.page.eq(c.page), p.tokens.eq(c.tokens),
                             p.head_dim.eq(c.head_dim), p.heads.eq(c.query_heads),
                             p.mapping.eq(c.mapping), lay["layers"].eq(c.layers),
                             lay["kv_heads"].eq(c.kv_heads), lay["layer"].eq(c.layer),
                             lay["head"].eq(c.head),
                             p.entry.eq(Mux(c.mode == Mode.W8A8, c.head_dim, c.head_dim << 1)),
                             p.nb.eq((d_m1 >> log_f) + 1),
                             p.pb.eq(((c.query_heads - 1) >> log_f) + 1),
                             p.last_mask.eq(Cat(1 if i == 0 else i <= d_m1[:log_f]
                                                for i in range(F)))]
                att, logit, is_int = ((c.op == Op.LOGIT) | (c.op == Op.ATTEND), c.op == Op.LOGIT,
                                      c.mode == Mode.W8A8)
                w4 = (c.mode == Mode.W4A16) & ~att
                m.d.sync += [p.att.eq(att), p.logit.eq(logit), p.attend.eq(c.op == Op.ATTEND),
                             p.int.eq(is_int), p.w4.eq(w4),
                             p.path.eq(Mux(c.op == Op.ATTEND, Path.ATTEND,
                                           Mux(logit, Mux(is_int, Path.LOGIT_INT,
                                                          Path.LOGIT_FLOAT),
                                               Mux(is_int, Path.INT,
                                                   Mux(w4, Path.W4, Path.FLOAT)))))]
                with m.If(att):
                    m.next = "PER_PAGE"
                with m.Else():
                    m.next = "SIZE"

    def _multiplier(self, m, platform):
        """The set-up's one multiplier: ``mul_a`` and ``mul_b`` (the operands of the state that
        drives them) into registers, their ``ECP5_MULT_WIDTH``-bit pieces' products into
        registers, the product into a register: three cycles. On the ECP5 the pieces' registers
        are each ``MULT18X18D``'s output register (:func:`~hdl.arith.dsp.ecp5_product`)."""
        # The operands' registers are in the fabric, beside the state decode that selects them,
        # not the blocks' own: the route to a block then starts from a flip-flop.
        a, b = Signal.like(self._mul_a, name="mul_a"), Signal.like(self._mul_b, name="mul_b")
        m.d.sync += [a.eq(self._mul_a), b.eq(self._mul_b)]
        chunk = ECP5_MULT_WIDTH
        terms = []
        for i in range(0, len(a), chunk):
            for j in range(0, len(b), chunk):
                x, y = a[i:i + chunk], b[j:j + chunk]
                if family(platform) == "ecp5":
                    piece = ecp5_product(m, x, y, name=f"mul_{i}_{j}", input_registers=False)
                else:
                    piece = Signal(len(x) + len(y), name=f"mul_{i}_{j}_p")
                    m.d.sync += piece.eq(x * y)
                terms.append(piece << (i + j))
        product = Signal(len(a) + len(b))
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        m.d.sync += product.eq(total)
        return product

    def _multiply(self, m, name, after, a, b, *assignments, then=None):
        """States ``name``, ``name_MUL``, ``name_ADD`` and ``name_SUM``: the operands into the
        multiplier's registers, its pieces' products, the product (:meth:`_multiplier`), then
        ``assignments`` (or ``then()``) from the product and on to ``after``."""
        with m.State(name):
            m.d.comb += [self._mul_a.eq(a), self._mul_b.eq(b)]
            m.next = f"{name}_MUL"
        with m.State(f"{name}_MUL"):
            m.next = f"{name}_ADD"
        with m.State(f"{name}_ADD"):
            m.next = f"{name}_SUM"
        with m.State(f"{name}_SUM"):
            m.d.sync += [target.eq(value) for target, value in assignments]
            if then is not None:
                then()
            else:
                m.next = after

    def _divide(self, m, name, after, dividend, divisor, quotient, remainder=None):
        """States ``name`` and ``name_WAIT``: start the divider, wait for its quotient."""
        div = self._div
        with m.State(name):
            m.d.comb += [div.start.eq(1), div.dividend.eq(dividend), div.divisor.eq(divisor)]
            m.next = f"{name}_WAIT"
        with m.State(f"{name}_WAIT"):
            with m.If(~div.busy):
                m.d.sync += quotient.eq(div.quotient)
                if remainder is not None:
                    m.d.sync += remainder.eq(div.remainder)
                m.next = after

    def _states(self, m):
        """The sizing states: one multiplication for a GEMV, the page walk of an attention
        command (docs/inflash.md, section 5): entries per page, the stream's size, the first
        page and the steps, and the last page's check."""
        cfg, p, walk, lay, product = self.cfg, self.plan, self._walk, self._layout, self._product
        log_g = cfg.group_size.bit_length() - 1
        mul, divide = self._multiply, self._divide

        def gemv_size():
            # rows x cols x (bytes per element); w4a16 has half a byte per code and a 4-byte
            # header per g codes.
            with m.Switch(p.mode):
                with m.Case(Mode.W8A8):
                    m.d.sync += p.size.eq(product)
                with m.Case(Mode.W4A16):
                    m.d.sync += p.size.eq((product >> 1) + (product >> (log_g - 2)))
                with m.Default():
                    m.d.sync += p.size.eq(product << 1)
            m.next = "PAGES"

        with m.State("PAGES"):
            # The GEMV's page after its last: its own cycle, so that the verdict's test of it
            # is one comparison.
            log_p = cfg.page_bytes.bit_length() - 1
            m.d.sync += self._page_end.eq(p.page + (p.size >> log_p) + (p.size[:log_p] != 0))
            m.next = "VERDICT"

        def walk_next():
            with m.If(p.mapping == Mapping.PAGE):
                m.next = "WRAPS"
            with m.Else():
                m.next = "FIRST_PAGE"

        attend = p.op == Op.ATTEND
        mul(m, "SIZE", None, p.rows, p.cols, then=gemv_size)
        divide(m, "PER_PAGE", "PAGE_USED", cfg.page_bytes, p.entry, walk["tp"])
        mul(m, "PAGE_USED", "STRIDE", walk["tp"], p.entry, (p.page_used, product))
        mul(m, "STRIDE", "ENTRY", lay["layers"] << 1, lay["kv_heads"], (p.stride, product))
        mul(m, "ENTRY", "TOTAL", Cat(attend, lay["layer"]), lay["kv_heads"],
            (walk["first_entry"], product + lay["head"]))
        mul(m, "TOTAL", "OPS", p.tokens, p.entry, (p.total, product))
        mul(m, "OPS", "X_BEATS", p.heads, p.nb, (p.ops, product))
        mul(m, "X_BEATS", None, p.tokens, p.pb,
            (p.x_beats, Mux(p.op == Op.LOGIT, p.ops, product)), then=walk_next)
        divide(m, "WRAPS", "LAST_PAGE", p.tokens - 1, walk["tp"], walk["wraps"])
        mul(m, "LAST_PAGE", "VERDICT", walk["wraps"], p.stride,
            (walk["last_page"], product + p.page + walk["first_entry"]),
            (p.first_page, p.page + walk["first_entry"]))
        divide(m, "FIRST_PAGE", "PAGE_STEP", walk["first_entry"], walk["tp"], p.first_page,
               p.first_col)
        divide(m, "PAGE_STEP", "FIRST_COLUMN", p.stride, walk["tp"], p.page_step,
               walk["slot_step"])
        mul(m, "FIRST_COLUMN", "COLUMN_STEP", p.first_col, p.entry,
            (p.first_col, product), (p.first_page, p.first_page + p.page))
        mul(m, "COLUMN_STEP", "END_ENTRY", walk["slot_step"], p.entry, (p.col_step, product))
        mul(m, "END_ENTRY", "LIMIT", p.tokens - 1, p.stride,
            (walk["end_entry"], product + walk["first_entry"]))
        mul(m, "LIMIT", "VERDICT", cfg.geometry.pages - p.page, walk["tp"],
            (walk["limit"], product))
