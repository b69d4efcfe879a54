"""The SHIELD controller's request pipeline: decode, resolve against liveness, commit.

A request admitted in cycle ``a`` *commits* in cycle ``a + COMMIT_LATENCY``: in that cycle its
effect on the liveness table and the bank ports is decided, and at its end it takes effect. The
pipeline never stalls, so every admitted request commits exactly ``COMMIT_LATENCY`` cycles later;
the controller decides admission (``req.ready``) from registers instead.

Stages, each ending in registers:

``admit`` (cycle ``a``)
    The request's global row goes to the liveness table's probe (two cycles, the state of ``a``).
``decode`` (cycle ``a + 1``)
    The row is compared with the rows of the three requests ahead of it (a write to the same row,
    a release whose range holds it).
``resolve`` (cycle ``a + 2``)
    The probe's answer is the liveness of the cycle ``a``. The three requests ahead commit in
    ``a``, ``a + 1`` and ``a + 2``; their effects on the row are applied to the answer in that
    order, so the request sees the row as the table will hold it when the request commits. The
    refusal, the read's ``live`` flag and the mantissa segment follow, and the release range is
    expanded into a row mask.
``commit`` (cycle ``a + 3``)
    The :attr:`RequestPipeline.commit` register. A ``SET_POLICY`` is refused here if any row is
    live (the table's ``any_live``).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer
from .ports import Op, TensorClass, request_layout
from .spec import SEGMENTS, WORD_BITS, Policy

__all__ = ["COMMIT_LATENCY", "command_layout", "plan_layout", "segment_banks", "RequestPipeline"]

#: Cycles from a request's admission to its commit.
COMMIT_LATENCY = 3


def command_layout(g_bits: int, col_bits: int, rows_total: int,
                   banks: int) -> data.StructLayout:
    """A request at commit: the decoded request and what its resolution found."""
    return data.StructLayout({
        "valid": 1,
        "access": 1,        # a READ, or a WRITE not refused: it uses its bank's macros
        "write_ok": 1,      # a WRITE not refused: its row becomes live
        "bank_hot": banks,  # its bank, one-hot
        "op": Op,
        "qo": 1,            # the request's class (WRITE, RELEASE_ROWS, RELEASE_CLASS)
        "g": g_bits,        # global row of ``addr``
        "g_last": g_bits,   # global row of ``last`` (RELEASE_ROWS)
        "col": col_bits,
        "data": WORD_BITS,
        "refused": 1,       # refused for a reason known before commit (not yet: rows live)
        "row_live": 1,      # READ: the row is live when the request commits
        "mant_qo": 1,       # mantissa segment: the request's class (WRITE), the row's (READ)
        "hot": rows_total,   # WRITE: its row, one-hot
        "ends": rows_total,  # the rows a release ends if live with its class (none if refused)
    })


def _row_span(first, last, rows: int):
    """Return the ``rows``-bit mask with bit ``i`` set for ``first <= i <= last`` (both unsigned),
    without the compares that cannot fail (``first <= rows - 1`` at the top, ``0 <= last``)."""
    top = (1 << len(first)) - 1
    return Cat((first <= i if i < top else 1) & (i <= last if i > 0 else 1) for i in range(rows))


def plan_layout(banks: int) -> data.StructLayout:
    """The banks of each segment that one request may access when it commits."""
    return data.StructLayout({segment: banks for segment in SEGMENTS})


def segment_banks(m: Module, op, cls, bank, banks: int, name: str):
    """Return a :func:`plan_layout` view: the banks a request may access, per segment.

    A ``WRITE`` or ``READ`` accesses bank ``bank`` of ``std`` and of one mantissa segment. A
    write's segment is its class; a read's is its row's class, unknown before the request is
    resolved, so a read counts in both. A refusal is not known either: a write counts.
    """
    plan = Signal(plan_layout(banks), name=name)
    hot = Signal(banks, name=f"{name}_hot")
    m.d.comb += hot.eq(1 << bank if banks > 1 else 1)
    is_write, is_read = op == Op.WRITE, op == Op.READ
    qo = cls == TensorClass.QO
    m.d.comb += [
        plan.std.eq(Mux(is_write | is_read, hot, 0)),
        plan.kv_mant.eq(Mux((is_write & ~qo) | is_read, hot, 0)),
        plan.qo_mant.eq(Mux((is_write & qo) | is_read, hot, 0)),
    ]
    return plan


def _apply(m: Module, live, qo, same, inside, write, release_rows, release_class, cmd_qo,
           name: str):
    """Liveness and class of a row after one committed command: a write to the row makes it
    live with the write's class; a release whose range holds the row (or a class release) ends
    it if the row has the command's class."""
    live_after, qo_after = Signal(name=f"{name}_live"), Signal(name=f"{name}_qo")
    written = write & same
    ended = ((release_rows & inside) | release_class) & (qo == cmd_qo)
    m.d.comb += [live_after.eq(written | (live & ~ended)),
                 qo_after.eq(Mux(written, cmd_qo, qo))]
    return live_after, qo_after


class RequestPipeline(wiring.Component):
    """Decode every admitted request and resolve it against the liveness it commits into.

    Parameters
    ----------
    bank_bits, row_bits, col_bits : int
        Address fields: word address = ``(row, bank, col)`` from the top.

    Members
    -------
    admit : In(stream.Signature(request_layout(addr_bits), always_ready=True))
        Admitted requests (the controller's ``req`` when it is accepted): one per cycle at most.
    probe_row : Out(g_bits)
        The global row of the request being admitted: the liveness table's probe.
    probe_live, probe_qo : In(1)
        The table's answer, ``PROBE_LATENCY`` (2) cycles later: liveness and class (1 = QO) of
        ``probe_row`` as they were in the cycle the row was given.
    any_live : In(1)
        Some row is live in the table this cycle.
    commit : Out(command_layout(...))
        The request committing this cycle (a register); ``valid`` low in a cycle with none.
    refused : Out(1)
        The committing request is refused (``commit.refused``, or a ``SET_POLICY`` while a row
        is live); a refused request changes nothing.
    upcoming : Out(data.ArrayLayout(plan_layout(banks), 2))
        The banks the requests committing in the next cycle (element 0) and the one after
        (element 1) may access (:func:`segment_banks`: a superset).

    Latency: ``COMMIT_LATENCY`` cycles from admission to commit, whatever the traffic.

    Assumes of its neighbours: the liveness table applies every non-refused commit at the end of
    its cycle and answers the probe as stated; nothing else changes the table.
    """

    def __init__(self, *, bank_bits: int, row_bits: int, col_bits: int):
        integer(bank_bits, "Bank address bits (bank_bits)", 0, 8)
        integer(row_bits, "Row address bits (row_bits)", 1, 16)
        integer(col_bits, "Column address bits (col_bits)", 1, 12)
        self.bank_bits, self.row_bits, self.col_bits = bank_bits, row_bits, col_bits
        self.g_bits = bank_bits + row_bits
        self.rows_total = 1 << self.g_bits
        addr_bits = self.g_bits + col_bits
        super().__init__({
            "admit": In(stream.Signature(request_layout(addr_bits), always_ready=True)),
            "probe_row": Out(self.g_bits),
            "probe_live": In(1),
            "probe_qo": In(1),
            "any_live": In(1),
            "commit": Out(command_layout(self.g_bits, col_bits, self.rows_total,
                                         1 << bank_bits)),
            "refused": Out(1),
            "upcoming": Out(data.ArrayLayout(plan_layout(1 << bank_bits), 2)),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.commit
        decode = Signal(request_layout(self.g_bits + self.col_bits), name="decode")
        decode_valid = Signal()
        m.d.sync += [decode_valid.eq(self.admit.valid), decode.eq(self.admit.payload)]
        m.d.comb += self.probe_row.eq(self._rows(self.admit.payload)[0])

        # The effects of the last two committed requests, for the bypass of the requests three
        # and two behind them.
        effect = data.StructLayout({"write": 1, "release_rows": 1, "release_class": 1, "qo": 1,
                                    "g": self.g_bits, "g_last": self.g_bits})
        last, last2 = Signal(effect, name="last"), Signal(effect, name="last2")
        op_ok = c.valid & ~c.refused         # writes and releases are refused before commit
        m.d.sync += [last.write.eq(op_ok & (c.op == Op.WRITE)),
                     last.release_rows.eq(op_ok & (c.op == Op.RELEASE_ROWS)),
                     last.release_class.eq(c.valid & (c.op == Op.RELEASE_CLASS)),
                     last.qo.eq(c.qo), last.g.eq(c.g), last.g_last.eq(c.g_last),
                     last2.eq(last)]

        resolve = self._decode_stage(m, decode, decode_valid, last)
        self._resolve_stage(m, resolve, last, last2)
        m.d.comb += self.refused.eq(c.refused | ((c.op == Op.SET_POLICY) & self.any_live))
        for k, (stage, valid) in enumerate(((resolve["req"], resolve["valid"]),
                                            (decode, decode_valid))):
            bank = stage.addr[self.col_bits:][:self.bank_bits]
            plan = segment_banks(m, stage.op, stage.cls, bank, 1 << self.bank_bits,
                                 f"upcoming{k}")
            m.d.comb += self.upcoming[k].eq(Mux(valid, plan, 0))
        return m

    def _rows(self, req):
        return req.addr[self.col_bits:], req.last[self.col_bits:]

    def _decode_stage(self, m: Module, decode, decode_valid, last) -> dict:
        """Compare the row with the three requests ahead; register into ``resolve``."""
        g, _ = self._rows(decode)
        req = Signal.like(decode, name="resolve")
        valid = Signal(name="resolve_valid")
        # ``ahead<k>``: the request ``k`` places ahead, in resolve (1), commit (2), committed (3).
        hits = Signal(data.StructLayout({f"ahead{k}_{what}": 1 for k in (1, 2, 3)
                                         for what in ("same", "inside")}
                                        | {"range_bad": 1, "code_bad": 1}),
                      name="resolve_hits")
        c = self.commit
        ahead = {"ahead1": self._rows(req), "ahead2": (c.g, c.g_last),
                 "ahead3": (last.g, last.g_last)}
        m.d.sync += [req.eq(decode), valid.eq(decode_valid),
                     hits.range_bad.eq(decode.last < decode.addr),
                     hits.code_bad.eq(decode.data >= len(Policy))]
        for k, (first, final) in ahead.items():
            m.d.sync += [hits[f"{k}_same"].eq(g == first),
                         hits[f"{k}_inside"].eq((first <= g) & (g <= final))]
        return {"req": req, "valid": valid, "hits": hits}

    def _resolve_stage(self, m: Module, resolve: dict, last, last2):
        """Apply the three commits ahead to the probe's answer; decide; register into ``commit``."""
        req, hits, c = resolve["req"], resolve["hits"], self.commit
        g, g_last = self._rows(req)
        # In commit order: two cycles ago (``last2``), last cycle (``last``), this cycle.
        live, qo = self.probe_live, self.probe_qo
        for k, e in (("ahead3", last2), ("ahead2", last)):
            live, qo = _apply(m, live, qo, hits[f"{k}_same"], hits[f"{k}_inside"], e.write,
                              e.release_rows, e.release_class, e.qo, f"after_{k}")
        ok = c.valid & ~c.refused
        live2, qo2 = _apply(m, live, qo, hits.ahead1_same, hits.ahead1_inside,
                            ok & (c.op == Op.WRITE), ok & (c.op == Op.RELEASE_ROWS),
                            c.valid & (c.op == Op.RELEASE_CLASS), c.qo, "after_ahead1")
        req_qo = req.cls == TensorClass.QO
        is_write = req.op == Op.WRITE
        refused = ((is_write & live2 & (qo2 != req_qo))
                   | ((req.op == Op.RELEASE_ROWS) & hits.range_bad)
                   | ((req.op == Op.SET_POLICY) & hits.code_bad))
        span = _row_span(g, g_last, self.rows_total)
        ends = Mux(resolve["valid"] & (req.op == Op.RELEASE_ROWS) & ~hits.range_bad, span, 0) \
            | (resolve["valid"] & (req.op == Op.RELEASE_CLASS)).replicate(self.rows_total)
        m.d.sync += [
            c.valid.eq(resolve["valid"]), c.op.eq(req.op), c.qo.eq(req_qo), c.g.eq(g),
            c.g_last.eq(g_last), c.col.eq(req.addr[:self.col_bits]), c.data.eq(req.data),
            c.refused.eq(refused), c.row_live.eq(live2),
            c.mant_qo.eq(Mux(is_write, req_qo, qo2)), c.ends.eq(ends),
            c.hot.eq(1 << g), c.bank_hot.eq(1 << g[:self.bank_bits]),
            c.write_ok.eq(resolve["valid"] & is_write & ~refused),
            c.access.eq(resolve["valid"] & ((req.op == Op.READ) | (is_write & ~refused))),
        ]
