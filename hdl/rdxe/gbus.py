"""The DXT's GBUS: the gatherer of the VACs' results and the KV writer (docs/rdxe.md sections 4.2
and 5)."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..pipeline import SkidBuffer, SkidQueue, delay
from ..validate import index_bits
from .sequencer import SCORE, op_layout
from .spec import (CODE_BITS, DESTS, GBUS_BYTES, DxtConfig, check_config, kv_layout,
                   response_layout, result_layout, word_layout)
from .ve import score_write_layout

__all__ = ["Gatherer", "KvWriter", "kv_word_layout"]

_OUT, _KEY, _VALUE = (DESTS.index(n) for n in ("out", "key", "value"))
_RESP_QUEUE = 4
#: Cycles from a Q.K^T's last GBUS word to the VE's maximum of its scores: the registered score
#: write, the word's maximum and the running maximum.
_QK_SETTLE = 3


def _words(cfg: DxtConfig) -> int:
    return max(cfg.max_outputs, cfg.capacity) // GBUS_BYTES + cfg.vacs + 2


def kv_word_layout(cfg: DxtConfig) -> data.StructLayout:
    """A GBUS word for the KV caches: ``value`` (else a key), its ``data`` and ``keep``, its
    index ``word`` in the operation, the ``token`` and KV ``group`` it belongs to."""
    return data.StructLayout({
        "value": 1, "data": data.ArrayLayout(signed(CODE_BITS), GBUS_BYTES), "keep": GBUS_BYTES,
        "word": unsigned(index_bits(_words(cfg))),
        "token": unsigned(index_bits(cfg.capacity + 1)),
        "group": unsigned(index_bits(cfg.kv_groups))})


#: A word's checks: which of its 4 results the VACs must produce (``need``), which exist
#: (``keep``), whether it is its operation's last word (``last_word``) and last word of results
#: (``last``).
_CHECKS = data.StructLayout({"need": GBUS_BYTES, "keep": GBUS_BYTES, "last_word": 1, "last": 1})


def _checks(total, outputs, words: int = 0):
    """The checks of a word with ``total`` outputs of the VACs and ``outputs`` results left, or
    of the word ``words`` words after it (compared with constants: no subtraction before)."""
    base = GBUS_BYTES * words
    return Cat(Cat(total > base + k for k in range(GBUS_BYTES)),
               Cat(outputs > base + k for k in range(GBUS_BYTES)),
               total <= base + GBUS_BYTES, outputs <= base + GBUS_BYTES)


def _after(total, outputs):
    """The outputs of the VACs and the results left after a word (``_checks(.., words=1)``'s
    counts)."""
    return total - GBUS_BYTES, Mux(outputs > GBUS_BYTES, outputs - GBUS_BYTES, 0)


def _slot_vac(w, vacs: int):
    """The first VAC of GBUS word ``w``: ``(4 w) mod N``."""
    log_n = vacs.bit_length() - 1
    return Cat(Const(0, 2), w[:log_n - 2]) if vacs > GBUS_BYTES else Const(0, 2)


def _in_word(v: int, slot_vac, vacs: int):
    """VAC ``v`` is one of the word's four."""
    return (v >> 2) == (slot_vac >> 2) if vacs > GBUS_BYTES else Const(1, 1)


class Gatherer(wiring.Component):
    """Gather the VACs' results into GBUS words of 4 in output order, and route each word.

    For each operation on ``ops`` (in command order) it takes the words of its ``total``
    outputs (whole passes: output ``o`` from VAC ``o mod N``), a word when all of its VACs have
    a result. Words of ``out`` GEMVs and of Q.K^T go to ``o`` (those of padding outputs past
    ``outputs`` only are taken, not sent); Q.K^T words also to ``scores``; key and value words
    to ``kv``. A refused operation takes nothing. Every operation gets a response.

    Parameters
    ----------
    cfg : DxtConfig

    Members
    -------
    ops : In(stream.Signature(op_layout(cfg)))
        The operations, in order, through a :class:`~hdl.pipeline.SkidBuffer` (``ready`` a
        register): one at the head until its last word, and one more behind it.
    results : In(stream.Signature(result_layout(vac))).array(vacs)
        The VACs' ``o``, each through a :class:`~hdl.pipeline.SkidQueue` (a skid buffer's
        handshake, ``ready`` a register): the decision to take a word, made from every VAC's
        result, does not reach back into the VACs' queues.
    o : Out(stream.Signature(word_layout()))
        Result words, through a :class:`~hdl.pipeline.SkidBuffer`: ``valid`` and ``payload``
        from registers, and ``ready`` goes into registers only.
    resp : Out(stream.Signature(response_layout()))
        One per operation, when its last word is taken (a queue of 4).
    scores : Out(stream.Signature(score_write_layout(ve), always_ready=True))
        Q.K^T words, registered, to the VE.
    kv : Out(stream.Signature(kv_word_layout(cfg), always_ready=True))
        Key and value words, in the cycle they are taken (the :class:`KvWriter` registers them).
    kv_done, qk_done : Out(1)
        A key or value is written (one cycle after its last word); a Q.K^T's maximum is final
        (:data:`_QK_SETTLE` cycles after its last word).
    fire : Out(1)
        A word is taken (for cycle measurements).

    Timing: a result on ``results`` can be taken into a word one cycle later (the skid buffer,
    ``golden.rdxe.Latency.gather``); one word per cycle; a word leaves on ``o`` the cycle after
    it is taken; while ``o`` stalls, one more word is taken into the skid register. Assumes
    each VAC's results come in output order.
    """

    def __init__(self, cfg: DxtConfig):
        self.cfg = check_config(cfg, DxtConfig, "DXT")
        vcfg = cfg.vac_config()
        super().__init__({
            "ops": In(stream.Signature(op_layout(cfg))),
            "results": In(stream.Signature(result_layout(vcfg))).array(cfg.vacs),
            "o": Out(stream.Signature(word_layout())),
            "resp": Out(stream.Signature(response_layout())),
            "scores": Out(stream.Signature(score_write_layout(cfg.ve_config()),
                                           always_ready=True)),
            "kv": Out(stream.Signature(kv_word_layout(cfg), always_ready=True)),
            "kv_done": Out(1), "qk_done": Out(1), "fire": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        N = self.cfg.vacs
        # The operation at the head waits in a register with its first two words' checks and
        # the counts after its first made, and each word's checks for the one after the next
        # are registered when it is taken: the decision to take a word starts from flip-flops,
        # and no comparison or subtraction sits in front of it or of the next checks (round
        # 15). A skid buffer, not a register stage: the decision ends at its registers and does
        # not reach the sequencer's operation queue (docs/rdxe.md 14.4, round 13).
        op_shape = op_layout(self.cfg)
        m.submodules.head = intake = SkidBuffer(data.StructLayout({
            "op": op_shape, "first": _CHECKS, "second": _CHECKS,
            "total": op_shape["total"].shape, "outputs": op_shape["outputs"].shape}),
            ready_copy=True)
        head = intake.o
        new = self.ops.payload
        after = _after(new.total, new.outputs)
        m.d.comb += [intake.i.valid.eq(self.ops.valid), self.ops.ready.eq(intake.i.ready),
                     intake.i.payload.op.eq(new),
                     intake.i.payload.first.eq(_checks(new.total, new.outputs)),
                     intake.i.payload.second.eq(_checks(new.total, new.outputs, words=1)),
                     intake.i.payload.total.eq(after[0]), intake.i.payload.outputs.eq(after[1])]
        op = head.payload.op
        w = Signal(range(_words(self.cfg)))
        at_first = Signal(init=1)                  # the next word is its operation's first
        # The outputs and results left after the next word, and the checks of the one after it.
        rem_total, rem_out = Signal.like(op.total), Signal.like(op.outputs)
        rem = Signal(_CHECKS)
        checks = data.View(_CHECKS, Mux(at_first, head.payload.first.as_value(),
                                        rem.as_value()))
        slot_vac = _slot_vac(w, N)
        results = []
        for v, port in enumerate(self.results):
            # A skid queue: the decision to take a word moves its pointers and state flip-flops,
            # not every payload bit's enable as a skid buffer's o.ready does (round 16).
            m.submodules[f"result{v}"] = skid = SkidQueue(port.payload.shape())
            wiring.connect(m, wiring.flipped(port), skid.i)
            results.append(skid.o)
        valids = Array(r.valid for r in results)
        ys = Array(r.payload.y for r in results)
        ready_all = Const(1, 1)
        word = Signal(word_layout())
        for k in range(GBUS_BYTES):
            ready_all = ready_all & (~checks.need[k] | valids[slot_vac + k])
            m.d.comb += [word.data[k].eq(ys[slot_vac + k]), word.keep[k].eq(checks.keep[k])]
        last_word = checks.last_word
        m.d.comb += word.last.eq(checks.last)
        # The words leave through a skid buffer, so that o.ready reaches no further than its
        # registers; its i.ready a copy of its own, which stays beside the decision to take a
        # word while the skid's registers go towards the word's consumer (round 13). Not a
        # skid queue: there the decision would enable the places' every bit (round 16's first
        # netlist, -1.79 ns), where a skid buffer's enables are its own flip-flops'.
        m.submodules.out = out = SkidBuffer(word_layout(), ready_copy=True)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        m.submodules.responses = resp = SyncFIFOBuffered(width=1, depth=_RESP_QUEUE)
        m.d.comb += [self.resp.valid.eq(resp.r_rdy), self.resp.payload.error.eq(resp.r_data),
                     resp.r_en.eq(self.resp.ready)]
        emits = ((op.kind == _OUT) | (op.kind == SCORE)) & checks.keep[0]
        fire = self.fire
        m.d.comb += fire.eq(head.valid & ~op.refused & ready_all & (~emits | out.i.ready) &
                            resp.w_rdy)
        refused = head.valid & op.refused & resp.w_rdy
        done = (fire & last_word) | refused
        m.d.comb += [head.ready.eq(done), resp.w_en.eq(done), resp.w_data.eq(refused)]
        # The KV writes land a cycle after the word, and the VE's maximum follows its last score
        # two cycles later: so do the completions that release Q.K^T and P.V.
        m.d.sync += self.kv_done.eq(fire & last_word & ((op.kind == _KEY) |
                                                        (op.kind == _VALUE)))
        m.d.comb += self.qk_done.eq(delay(m, fire & last_word & (op.kind == SCORE), _QK_SETTLE,
                                          name="qk_done", reset=True))
        with m.If(fire):
            later = _after(rem_total, rem_out)
            m.d.sync += [w.eq(Mux(last_word, 0, w + 1)), at_first.eq(last_word),
                         rem_total.eq(Mux(at_first, head.payload.total, later[0])),
                         rem_out.eq(Mux(at_first, head.payload.outputs, later[1])),
                         rem.eq(Mux(at_first, head.payload.second.as_value(),
                                    _checks(rem_total, rem_out, words=1)))]
        m.d.comb += [out.i.valid.eq(fire & emits), out.i.payload.eq(word)]
        for v, result in enumerate(results):
            m.d.comb += result.ready.eq(fire & _in_word(v, slot_vac, N) & checks.need[v & 3])
        scores = self.scores.payload
        m.d.sync += [self.scores.valid.eq(fire & (op.kind == SCORE)), scores.word.eq(w),
                     scores.first.eq(at_first), scores.data.eq(word.data),
                     scores.keep.eq(word.keep)]
        kv = self.kv.payload
        m.d.comb += [self.kv.valid.eq(fire & ((op.kind == _KEY) | (op.kind == _VALUE))),
                     kv.value.eq(op.kind == _VALUE), kv.data.eq(word.data),
                     kv.keep.eq(word.keep), kv.word.eq(w), kv.token.eq(op.token),
                     kv.group.eq(op.group)]
        return m


class KvWriter(wiring.Component):
    """Write GBUS words into the VACs' KV caches: keys by their owner, values by their VAC.

    A key word (channels ``4 w .. 4 w + 3`` of token ``t``'s key) goes to VAC ``t mod N``,
    byte-enabled into row ``g group_rows + (t // N) (d / lanes) + 4 w // lanes`` at bytes ``4 w
    mod lanes ..``; a value word's channel ``e`` is written by its own VAC ``e mod N`` into row
    ``kv_rows / 2 + g group_rows + (t // lanes) ceil(d / N) + e // N``, byte ``t mod lanes``
    (``golden.rdxe.kv_address``).

    Parameters
    ----------
    cfg : DxtConfig

    Members
    -------
    i : In(stream.Signature(kv_word_layout(cfg), always_ready=True))
        The words, at most one per cycle.
    kv : Out(stream.Signature(kv_layout(vac))).array(vacs)
        Each VAC's KV-cache writes, from registers, one cycle after the word; ``ready`` is
        ignored (a VAC's ``kv`` is always ready).
    """

    def __init__(self, cfg: DxtConfig):
        self.cfg = check_config(cfg, DxtConfig, "DXT")
        super().__init__({
            "i": In(stream.Signature(kv_word_layout(cfg), always_ready=True)),
            "kv": Out(stream.Signature(kv_layout(cfg.vac_config()))).array(cfg.vacs),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        N, L = cfg.vacs, cfg.lanes
        log_n, log_l = N.bit_length() - 1, L.bit_length() - 1
        word = self.i.payload
        t, base_o = word.token, word.word << 2
        slot_vac = _slot_vac(word.word, N)
        key_row = word.group * cfg.group_rows + (t >> log_n) * cfg.key_rows + (base_o >> log_l)
        key_en = Cat(*word.keep) << base_o[:log_l]          # shift amounts cut to their range
        value_row = (cfg.kv_rows // 2 + word.group * cfg.group_rows + (t >> log_l) * cfg.value_rows +
                     (base_o >> log_n))
        for v, port in enumerate(self.kv):
            slot = v & 3
            mine_key = ~word.value & ((t & (N - 1)) == v)
            mine_value = word.value & _in_word(v, slot_vac, N) & word.keep[slot]
            bytes_ = Signal(data.ArrayLayout(signed(CODE_BITS), GBUS_BYTES), name=f"kv_word{v}")
            m.d.sync += [
                port.valid.eq(self.i.valid & (mine_key | mine_value)),
                port.payload.addr.eq(Mux(word.value, value_row, key_row)),
                port.payload.en.eq(Mux(word.value, Const(1, L) << t[:log_l], key_en)),
            ]
            for k in range(GBUS_BYTES):
                # A value byte is the VAC's own result: its slot of the word.
                m.d.sync += bytes_[k].eq(Mux(word.value, word.data[slot], word.data[k]))
            for lane in range(L):
                m.d.comb += port.payload.data[lane].eq(bytes_[lane % GBUS_BYTES])
        return m
