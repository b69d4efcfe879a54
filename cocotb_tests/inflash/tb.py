"""cocotb testbench of the KVNAND in-flash PE (``inflash``) on a behavioural flash plane: GEMV
on weight pages, Logit and Attend on KV pages.

This module holds the tests; the environment is :mod:`.env` (:class:`~.env.InflashTB`,
:class:`~.env.InflashUnitTB`), what each command expects :mod:`.expect`, the refusal rules and
coverpoints :mod:`.contract`, the flash plane :mod:`.plane`, the KV writer's words
:mod:`.kvstream`.

The design's ``rd_cmd`` / ``rd_data`` ports are answered by :class:`~.plane.FlashPlane` (tR,
two-register page pipeline, page stream at ``transfer_bytes`` per cycle, per-block read
counters). ``cmd`` and ``x`` are driven with random idle cycles, ``y`` is back-pressured at
random, and the plane inserts random gaps in the page stream.

The model is fed by the monitors. A command seen on ``cmd`` opens a GEMV or an attention
command and expects its page reads on ``rd_cmd``: GEMV, pages ``page .. page + n - 1``, the
last one short (:func:`golden.inflash.page_count`, :func:`golden.inflash.stream_bytes`);
Logit and Attend, the pages of the head's walk with the head's entries of each
(:func:`golden.inflash.kv_address`, :func:`kv_reads`). The ``x`` beats and the bytes of the page
reads the design actually took (the ``rd_data`` monitor, each read cut to its size) fill that
command's vector (the query vectors, the attention weights) and byte stream. As soon as a row's
bytes and the whole vector are in, the row's output is :func:`golden.inflash.gemv` of that row;
a token's entry gives its ``G`` Logit scores (:func:`golden.inflash.logit`); the last token's
entry and weights give the Attend sums (:func:`golden.inflash.attend`). A command the contract
refuses expects one ``error`` word. The stimulus only programs pages and sends commands and
``x``.

Tests: ``random_gemvs`` (every implemented mode; shapes that fill pages exactly and shapes that
do not, rows straddling pages, odd columns), ``corner_cases`` (special values, one element, the
plane's last page, the longest row, modes back to back), ``refused`` (every refusal rule between
good commands), ``full_rate`` (one GEMV per mode with no idle cycles, no back-pressure and no
gaps: page period and total cycles against :func:`golden.inflash.gemv_timing`);
``random_attention`` (Logit and Attend, MHA and GQA, fp16, bf16 and int8, page-level and naive
mappings, sequences that fill pages exactly and not, between GEMVs), ``attention_refusals``
(every attention refusal rule), ``attention_pipeline`` (Logit and Attend with no idle cycles:
pages, period and total against :func:`golden.inflash.attention_timing`, and the page reads of
both mappings against :func:`golden.inflash.kv_pages_read`). Every test ends by comparing the
plane's per-block read counters with :func:`golden.inflash.block_reads` of the pages the
commands name.
"""

from __future__ import annotations

import json
import math
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from golden import inflash as golden
from hdl.inflash.gearbox import Gearbox
from hdl.inflash.reader import PageReader
from hdl.inflash.spec import IMPLEMENTED_MODES, MAX_KV_HEADS, MAX_TOKENS, Mapping, Mode, Op

from ..tb import select_tb
from .contract import is_refused
from .env import InflashTB, InflashUnitTB
from .kvstream import kv_command

#: Environment variables of the ``full_rate`` shape (benchmarks sweep them).
ENV_ROWS, ENV_COLS = "MEMWALL_INFLASH_ROWS", "MEMWALL_INFLASH_COLS"
#: The modes ``full_rate`` runs (comma-separated; default all).
ENV_MODES = "MEMWALL_INFLASH_MODES"
#: The ``attention_reads`` command, JSON: ``op``, ``tokens``, ``group``, ``mapping``,
#: ``layers``, ``kv_heads``, ``head_dim`` (fp16).
ENV_ATTENTION = "MEMWALL_INFLASH_ATTENTION"


def _tb(dut, **kwargs) -> InflashTB:
    return select_tb(dut, {"inflash": InflashTB, "inflash-unit": InflashUnitTB}, **kwargs)


def _modes():
    return [Mode(m).name.lower() for m in IMPLEMENTED_MODES]


def _shapes(cfg, mode):
    """(rows, cols): exact page fills and not, straddling rows, one beat, odd columns; w4a16:
    one to four groups per row, records straddling pages, an exact fill."""
    P, F, M, g = cfg.page_bytes, cfg.fmacs, cfg.max_cols, cfg.group_size
    if mode == "w4a16":
        if g > M:
            return []
        record = golden.SCALE_BYTES + g // 2
        exact = P // math.gcd(P, record)          # records that fill whole pages
        cols = [c for c in (g, 2 * g, 3 * g, 4 * g) if c <= M]
        return [(1, g), (3, cols[-1]), (5, cols[min(2, len(cols) - 1)]),
                (max(1, exact // (cols[-1] // g)), cols[-1])]
    cols = min(M, P // 2)                 # fp16: one row is exactly one page
    return [(2, cols), (4, max(1, cols // 4)), (3, 5), (5, 13), (1, 1), (7, F + 1),
            (2, M), (3, max(1, M - 1))]


@cocotb.test()
async def random_gemvs(dut):
    """Every implemented mode on shapes that fill pages exactly and shapes that do not."""
    tb = _tb(dut)
    await tb.reset()
    for mode in _modes():
        for rows, cols in _shapes(tb.cfg, mode):
            rows = min(rows, tb.cfg.max_rows)
            if golden.page_count(mode, rows, cols, group_size=tb.cfg.group_size,
                                 page_bytes=tb.cfg.page_bytes) <= tb.geometry.pages:
                tb.gemv(mode, rows, cols)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def corner_cases(dut):
    """Special values, one element, the plane's last page, modes back to back."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    one, tiny, nzero = 0x3C00, 0x0C00, 0x8000            # fp16 1.0, 2**-12, -0
    special = np.array([[one, 0, tiny, tiny],             # 1 + 2**-23 (tree order)
                        [nzero, nzero, nzero, nzero],     # -0
                        [0x7C00, one, 0, 0],              # inf * 0: NaN
                        [0x7C00, 0x7C00, 0, 0],           # inf
                        [0xFC00, 0x7C00, 0, 0],           # inf - inf: NaN
                        [0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF],  # large but finite in fp32
                        [0x0001, one, 0, 0]], np.uint16)  # a subnormal weight flushes
    tb.gemv("fp16", 7, 4, weights=golden.Weights("fp16", special),
            x=np.array([one, one, tiny, tiny]))
    # Rows of -0 products only, padded past the row's end (cols not a multiple of F).
    cols = cfg.fmacs + 1 if cfg.fmacs > 1 else 3
    tb.gemv("bf16", 2, cols, weights=golden.Weights("bf16", np.full((2, cols), 0x8000)),
            x=np.full(cols, 0x3F80))
    # int8 extremes: -128 * -128 summed over the longest row.
    M = cfg.max_cols
    tb.gemv("w8a8", 1, M, weights=golden.Weights("w8a8", np.full((1, M), -128)),
            x=np.full(M, -128))
    # w4a16: the largest codes, scales and offsets (sums overflow to infinities), a -0 offset.
    g = cfg.group_size
    if g <= M:
        G = M // g
        tb.gemv("w4a16", 2, M, weights=golden.Weights(
            "w4a16", np.full((2, M), 15), np.array([[0x7BFF] * G, [0x3C00] * G]),
            np.array([[0xFBFF] * G, [0x8000] * G]), g), x=np.full(M, 0x7BFF))
    # One element on the plane's last page, then modes alternating back to back.
    tb.gemv("fp16", 1, 1, page=tb.geometry.pages - 1)
    for mode in ("w8a8", "fp16", "w8a8", "bf16", "bf16", "w8a8"):
        tb.gemv(mode, 3, 7)
    if g <= M:
        for mode in ("w4a16", "fp16", "w4a16", "w4a16", "w8a8", "w4a16"):
            tb.gemv(mode, 2, g)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def refused(dut):
    """Every refusal rule answers one error word, in order, between GEMVs that still work."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    tb.gemv("fp16", 3, 5)
    tb.command(Mode.FP16, 0, 4, 0)                              # no rows
    tb.command(Mode.W8A8, 2, 0, 0)                              # no columns
    tb.command(Mode.FP16, cfg.max_rows + 1, 4, 0)               # too many rows
    tb.command(Mode.BF16, 1, cfg.max_cols + 1, 0)               # too many columns
    tb.command(Mode.W4A16, 1, cfg.group_size + 1, 0)            # cols not a multiple of g
    tb.command(Mode.FP16, 2, cfg.max_cols, tb.geometry.pages - 1)   # past the last page
    tb.gemv("w8a8", 2, 9)
    await tb.drain()
    tb.check_block_reads()


def _buffered_beats(cfg, mode: str) -> int:
    """Beats of compute the read register and the gearbox's buffer hold at most."""
    held = Gearbox(cfg).capacity + PageReader.latency * cfg.transfer_bytes
    elements = {"fp16": held // 2, "bf16": held // 2, "w8a8": held, "w4a16": 2 * held}[mode]
    return -(-elements // cfg.fmacs)


@cocotb.test()
async def full_rate(dut):
    """One GEMV per mode, no idle cycles, no back-pressure, no gaps: page period and total
    cycles against golden.inflash.gemv_timing."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, gaps=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg, geo = tb.cfg, tb.geometry
    P = cfg.page_bytes
    rows = int(os.environ.get(ENV_ROWS, 0))
    cols = int(os.environ.get(ENV_COLS, 0)) or min(cfg.max_cols, P // 2)
    figures = {}
    modes = os.environ.get(ENV_MODES, "").split(",") if os.environ.get(ENV_MODES) else _modes()
    for mode in modes:
        if mode == "w4a16" and cols % cfg.group_size:
            continue
        # At least 12 full pages (the steady state), capped by the plane and max_rows.
        row_bytes = golden.stream_bytes(mode, 1, cols, group_size=cfg.group_size)
        n_rows = rows or min(cfg.max_rows, max(1, -(-12 * P // row_bytes)))
        first_read = len(tb.plane.read_start)
        tb.gemv(mode, n_rows, cols, page=0)
        await tb.drain()
        pe_latency = tb.component.pe_latency(Mode[mode.upper()])
        timing = golden.gemv_timing(geo, mode, n_rows, cols, group_size=cfg.group_size,
                                    pe_latency=pe_latency)
        starts = np.array(tb.plane.stream_start[first_read:])
        assert len(starts) == timing.pages, f"{mode}: {len(starts)} pages streamed, " \
                                            f"{timing.pages} expected"
        t0 = tb.plane.read_start[first_read]
        total = tb.output_monitors["y"].last_cycle - t0 + 1
        # Steady state: from the second page on (the first one may wait for x). Pages whose
        # rows or records fall differently take different times, so the mean period is
        # compared with the model's mean over the same pages (its bound is timing.period).
        first = 1 if len(starts) > 2 else 0
        steady = starts[first:]
        model = timing.stream_start[first:]
        period = (steady[-1] - steady[0]) / (len(steady) - 1) if len(steady) > 1 else 0.0
        model_period = (model[-1] - model[0]) / (len(model) - 1) if len(model) > 1 else 0.0
        compute = int(timing.compute.max())
        figures[mode] = {
            "rows": n_rows, "cols": cols, "pages": timing.pages, "tR": timing.tR,
            "transfer": int(timing.transfer.max()), "compute": compute,
            "period": round(float(period), 2), "model_period": round(float(model_period), 2),
            "period_bound": timing.period,
            "period_min": int(np.diff(steady).min()) if len(steady) > 1 else 0,
            "period_max": int(np.diff(steady).max()) if len(steady) > 1 else 0,
            "total": int(total), "model_total": timing.total, "excess": int(total - timing.total),
            "first_stream": int(starts[0] - t0), "pe_latency": pe_latency}
        tb.log.info("%s: page starts %s", mode, (starts - t0).tolist())
        if len(starts) > 1:
            # The read register and the gearbox's buffer let a page's last word go, and the
            # next page start, before its compute ends, once: the RTL may lead the model by
            # the beats they hold; it may never lag by more than 1 % of the period.
            span, model_span = steady[-1] - steady[0], model[-1] - model[0]
            lead = _buffered_beats(cfg, mode)
            assert -lead <= span - model_span <= 0.01 * model_span, \
                f"{mode}: pages 1 to {len(starts) - 1} streamed in {span} cycles, model " \
                f"{model_span} (lead at most {lead}, lag at most 1 %)"
        assert total <= timing.total + compute, \
            f"{mode}: {total} cycles, model {timing.total} + one page compute {compute}"
        assert starts[0] - t0 == timing.tR, \
            f"{mode}: first page streamed {starts[0] - t0} cycles after its read, not tR"
    # The benchmark table's columns (cocotb_tests/bench.py): the fp16 GEMV's beats over its
    # total cycles (PE utilization) and its latency.
    first = next(iter(figures))
    fig = figures[first]
    beats = fig["rows"] * -(-fig["cols"] // cfg.fmacs)
    tb.report("full_rate", items=beats, cycles=fig["total"],
              per_cycle=round(beats / fig["total"], 4), latency=fig["pe_latency"],
              latency_meaning=f"last page word to last y ({first})",
              **{f"{m}_{k}": v for m, f in figures.items() for k, v in f.items()})
    tb.check_block_reads()


# --- attention -------------------------------------------------------------------------------

def _attention_layouts(cfg) -> list[dict]:
    """KV layouts for the plane's page size: a page of whole entries and a partial last page,
    one head token per naive page (``S >= T_p``) and several (``S < T_p``, gathered reads)."""
    d = max(1, min(cfg.max_head_dim, cfg.page_bytes // 8))      # at least 4 fp16 entries a page
    return [dict(layers=2, kv_heads=2, head_dim=d),
            dict(layers=1, kv_heads=1, head_dim=max(1, d // 2)),
            dict(layers=2, kv_heads=3, head_dim=max(1, d - 3))]


def _groups(cfg, head_dim: int) -> list[int]:
    """MHA and GQA groups that the PE takes with this head dimension."""
    nb = -(-head_dim // cfg.fmacs)
    return [G for G in (1, 2, 4, 3) if G <= cfg.max_query_heads and G * nb <= cfg.max_beats]


def _fits(tb, layout_kw: dict, fmt: str, seq_len: int, mapping: str) -> bool:
    layout = golden.KVLayout(**layout_kw, kv_format=fmt, page_bytes=tb.cfg.page_bytes,
                             mapping=mapping)
    return golden.kv_page_count(layout, seq_len) <= tb.geometry.pages


@cocotb.test()
async def random_attention(dut):
    """Logit and Attend, MHA and GQA, fp16, bf16 and int8, both mappings, sequences that fill
    their pages exactly and not, between GEMVs; every result bit for bit."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    rng = tb.rng
    for index, layout in enumerate(_attention_layouts(cfg)):
        tp = cfg.page_bytes // (2 * layout["head_dim"])
        for op in ("logit", "attend"):
            for G in _groups(cfg, layout["head_dim"]):
                fmt = ("fp16", "bf16", "int8")[(G + index) % 3]
                mapping = golden.MAPPINGS[(G + index + (op == "attend")) % 2]
                seq_len = rng.choice([2 * tp, 2 * tp + 1, tp - 1 if tp > 1 else 3])
                if not _fits(tb, layout, fmt, seq_len, mapping):
                    continue
                layer = rng.randrange(layout["layers"])
                head = rng.randrange(layout["kv_heads"])
                tb.attention(op, fmt, G, seq_len, layer=layer, head=head, mapping=mapping,
                             **layout)
        tb.gemv(("fp16", "w8a8", "bf16")[index], 3, 5)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def attention_refusals(dut):
    """Every attention refusal rule answers one error word, in order, between commands that
    still work."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    layout = _attention_layouts(cfg)[0]
    good = dict(op=Op.LOGIT, page=0, tokens=4, head_dim=layout["head_dim"], query_heads=1,
                mapping=Mapping.PAGE, layers=layout["layers"], kv_heads=layout["kv_heads"],
                layer=0, head=0)
    tb.attention("attend", "fp16", 2, 5, layer=1, head=0, **layout)
    # G ceil(d / F) beats of query vectors above the x buffer's max_cols / F words: the
    # largest group with the smallest head dimension that overflows (each d fits a page).
    G = cfg.max_query_heads
    wide = [d for d in range(1, cfg.max_head_dim + 1)
            if G * -(-d // cfg.fmacs) > cfg.max_beats and 2 * d <= cfg.page_bytes]
    rules = [
        (Mode.W4A16, {}),                                        # no w4a16 KV
        (Mode.FP16, {"op": 3}),                                  # no such operation
        (Mode.FP16, {"tokens": 0}), (Mode.BF16, {"tokens": MAX_TOKENS + 1}),
        (Mode.FP16, {"query_heads": 0}),
        (Mode.FP16, {"query_heads": cfg.max_query_heads + 1}),
        (Mode.FP16, {"head_dim": 0}), (Mode.FP16, {"head_dim": cfg.max_head_dim + 1}),
        (Mode.W8A8, {"layers": 0}), (Mode.FP16, {"kv_heads": MAX_KV_HEADS + 1}),
        (Mode.FP16, {"layer": layout["layers"]}), (Mode.FP16, {"head": layout["kv_heads"]}),
        (Mode.FP16, {"tokens": 4 * tb.geometry.pages}),          # walk past the last page
        (Mode.FP16, {"mapping": Mapping.NAIVE, "page": tb.geometry.pages - 1, "tokens": 2})]
    if wide:
        rules.append((Mode.FP16, {"query_heads": G, "head_dim": wide[0]}))
    else:
        tb.log.info("no head dimension overflows the x buffer with %d query heads", G)
    for mode, fields in rules:
        cmd = {**good, "mode": mode, **fields}
        assert is_refused(cfg, cmd), f"the rule {fields} does not refuse {cmd}"
        tb.command(**cmd)
    tb.attention("logit", "bf16", 1, 3, layer=1, head=1, **layout)
    tb.gemv("w8a8", 2, 9)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def attention_pipeline(dut):
    """Logit and Attend of one head group, MHA and GQA, with no idle cycles, no back-pressure
    and no gaps: the pages read, the page period and the total cycles against
    golden.inflash.attention_timing; the page-level mapping against the naive one."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, gaps=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg, geo = tb.cfg, tb.geometry
    layout = _attention_layouts(cfg)[0]
    d = layout["head_dim"]
    tp = cfg.page_bytes // (2 * d)
    seq_len = min(12 * tp, (geo.pages // (2 * layout["layers"] * layout["kv_heads"])) * tp)
    figures = {}
    for op in ("logit", "attend"):
        for G in [G for G in _groups(cfg, d) if G != 3]:
            for mapping in golden.MAPPINGS:
                if mapping == "naive" and G > 1:
                    continue
                T = seq_len if mapping == "page" else min(seq_len, geo.pages // 2)
                kv = golden.KVLayout(**layout, page_bytes=cfg.page_bytes, mapping=mapping)
                if golden.kv_page_count(kv, T) > geo.pages:
                    continue
                first_read = len(tb.plane.read_start)
                tb.attention(op, "fp16", G, T, layer=1, head=0, mapping=mapping, page=0,
                             **layout)
                await tb.drain()
                cmd_op = Op.LOGIT if op == "logit" else Op.ATTEND
                timing = golden.attention_timing(geo, kv, T, op=op, group=G, layer=1, head=0)
                pe_latency = tb.component.pe_latency(
                    Mode.FP16, cmd_op, query_heads=G, head_dim=d,
                    last_page=(timing.transfer[-1], timing.compute[-1]))
                timing = golden.attention_timing(geo, kv, T, op=op, group=G, layer=1, head=0,
                                                 pe_latency=pe_latency)
                reads = tb.plane.read_pages[first_read:]
                kind = golden.K if op == "logit" else golden.V
                assert len(reads) == timing.pages == golden.kv_pages_read(
                    kv, T, layer=1, kind=kind), f"{op} {mapping}: {len(reads)} page reads"
                starts = np.array(tb.plane.stream_start[first_read:])
                t0 = tb.plane.read_start[first_read]
                total = tb.output_monitors["y"].last_cycle - t0 + 1
                period = float(np.mean(np.diff(starts[1:]))) if len(starts) > 2 else 0.0
                model = timing.stream_start[1:]
                model_period = float(np.mean(np.diff(model))) if len(model) > 1 else 0.0
                name = f"{op}_G{G}_{mapping}"
                figures[name] = {
                    "tokens": T, "pages": timing.pages, "tR": timing.tR,
                    "transfer": int(timing.transfer.max()), "compute": int(timing.compute.max()),
                    "period": round(period, 2), "model_period": round(model_period, 2),
                    "total": int(total), "model_total": timing.total,
                    "excess": int(total - timing.total), "pe_latency": pe_latency}
                tb.log.info("%s: page starts %s", name, (starts - t0).tolist())
                assert starts[0] - t0 == timing.tR, \
                    f"{name}: first page streamed {starts[0] - t0} cycles after its read"
                # Where compute sets the pace, the K/V ring lets a page's words in up to two
                # entries' compute early, so pages start early while the ring fills: over a
                # short run the mean period is below the model's; the steady state and the
                # total are the model's.
                if len(starts) > 2:
                    assert period <= 1.01 * model_period, \
                        f"{name}: page period {period:.2f} cycles, model {model_period:.2f}"
                assert total == timing.total, \
                    f"{name}: {total} cycles, attention_timing {timing.total}"
    logit = figures.get("logit_G1_page")
    tb.report("attention_pipeline", **{f"{n}_{k}": v for n, f in figures.items()
                                        for k, v in f.items()},
              **({"pages_page_level": logit["pages"],
                  "pages_naive": figures["logit_G1_naive"]["pages"]} if logit else {}))
    tb.check_block_reads()


# --- the KV page writer (inflash-unit) -----------------------------------------------------------

def _kv_layout(cfg, mapping: str, fmt: str = "fp16", **kw) -> golden.KVLayout:
    """The tests' KV layout: 2 layers of 2 KV heads (``S = 8`` streams), entries of a quarter
    page at most (``T_p >= 4``)."""
    kw = {**_attention_layouts(cfg)[0], **kw}
    return golden.KVLayout(kw["layers"], kw["kv_heads"], kw["head_dim"], fmt,
                           page_bytes=cfg.page_bytes, mapping=mapping)


@cocotb.test()
async def kv_write_read(dut):
    """Sequences written through the KV page writer under both mappings and read back by Logit
    and Attend, MHA and GQA, a GEMV sharing the flash port with the programs: the pages
    programmed, their images, the mapping table and the statuses against
    golden.inflash.kv_write; every result bit for bit; the naive mapping reads
    golden.inflash.kv_pages_read's extra pages for the same Logit; per-block read counts."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    T = 9
    layouts = {"page": _kv_layout(cfg, "page"), "naive": _kv_layout(cfg, "naive", "bf16"),
               "int8": _kv_layout(cfg, "page", "int8")}
    regions, at = {}, 0
    for name, layout in layouts.items():
        regions[name] = (at, golden.kv_page_count(layout, T))
        at += regions[name][1]
    for name, layout in layouts.items():
        tb.write_kv(layout, *regions[name], seq_len=T)
    # A GEMV on pages after the KV regions, its reads interleaved with the programs.
    tb.gemv("fp16", 3, 5, page=at)
    await tb.kv_done()
    G = max(_groups(cfg, layouts["page"].head_dim)[:3])
    reads = {}
    for name, layout in layouts.items():
        fmt = layout.kv_format
        for op, group in (("logit", 1), ("attend", G)):
            first = len(tb.plane.read_pages)
            tb.attention(op, fmt, group, T, layers=layout.layers, kv_heads=layout.kv_heads,
                         head_dim=layout.head_dim, layer=1, head=1, mapping=layout.mapping,
                         page=regions[name][0], program=False)
            await tb.drain()
            reads[name, op] = len(tb.plane.read_pages) - first
    await tb.check_writes()
    tb.check_block_reads()
    same = layouts["page"].with_mapping("naive")
    extra = golden.kv_pages_read(same, T, layer=1, head=1) \
        - golden.kv_pages_read(layouts["page"], T, layer=1, head=1)
    assert reads["naive", "logit"] - reads["page", "logit"] == extra > 0, \
        f"page reads {reads}, the naive mapping should need {extra} more"
    tb.report("kv_write_read", programs=len(tb.programs), reads_page_level=reads["page", "logit"],
              reads_naive=reads["naive", "logit"])


@cocotb.test()
async def kv_overflow(dut):
    """Out of buffer (more streams than buffer pages: nothing stored), out of pages (the tokens
    that fit are programmed, the rest dropped), a sequence ending inside a token, refused
    layouts; a Logit after them reads what was stored."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    layout = _kv_layout(cfg, "page")
    tp, S = layout.tokens_per_page, layout.entries_per_token
    wide = _kv_layout(cfg, "page", kv_heads=-(-(tb.slots + 1) // 4))      # S > slots
    assert wide.entries_per_token > tb.slots
    tb.write_kv(wide, 0, 8 * wide.entries_per_token, seq_len=2)
    tb.write_kv(layout, 0, S, seq_len=tp + 2)                              # one group fits
    tb.write_kv(layout.with_mapping("naive"), S, 3, seq_len=4)              # a few tokens fit
    tb.write_kv(layout, S + 3, S, seq_len=2, entries=S + 3)                 # ends in token 1
    bad = kv_command(layout, 2 * S + 3, S)
    for fields in ({"head_dim": 0}, {"mode": Mode.W4A16}, {"layers": 0},
                   {"kv_heads": MAX_KV_HEADS + 1}, {"pages": 0},
                   {"page": tb.geometry.pages - 1, "pages": 2}):
        tb.write_kv(layout, 0, 1, seq_len=1, command={**bad, **fields})
    await tb.kv_done()
    tb.attention("logit", "fp16", 1, tp, layers=layout.layers, kv_heads=layout.kv_heads,
                 head_dim=layout.head_dim, layer=1, head=0, page=0, program=False)
    await tb.drain()
    await tb.check_writes()
    tb.check_block_reads()


@cocotb.test()
async def attention_reads(dut):
    """One Logit or Attend of a head group with no idle cycles and no back-pressure, the
    command from ``MEMWALL_INFLASH_ATTENTION`` (benchmarks; default: 3 T_p tokens of the
    tests' layout, naive): results bit for bit, the pages read equal to
    golden.inflash.kv_pages_read, per-block counts, and the total against attention_timing."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, gaps=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg = tb.cfg
    layout = _attention_layouts(cfg)[0]
    spec = {"op": "logit", "group": 1, "mapping": "naive",
            "tokens": 3 * (cfg.page_bytes // (2 * layout["head_dim"])), **layout}
    spec.update(json.loads(os.environ.get(ENV_ATTENTION) or "{}"))
    kv = golden.KVLayout(spec["layers"], spec["kv_heads"], spec["head_dim"],
                         page_bytes=cfg.page_bytes, mapping=spec["mapping"])
    T, G, op = spec["tokens"], spec["group"], spec["op"]
    tb.attention(op, "fp16", G, T, layers=kv.layers, kv_heads=kv.kv_heads,
                 head_dim=kv.head_dim, layer=0, head=0, mapping=kv.mapping, page=0)
    await tb.drain(stall_cycles=1_000_000)
    timing = golden.attention_timing(tb.geometry, kv, T, op=op, group=G)
    latency = tb.component.pe_latency(Mode.FP16, Op.LOGIT if op == "logit" else Op.ATTEND,
                                      query_heads=G, head_dim=kv.head_dim,
                                      last_page=(timing.transfer[-1], timing.compute[-1]))
    total = tb.output_monitors["y"].last_cycle - tb.plane.read_start[0] + 1
    reads = len(tb.plane.read_pages)
    model = golden.kv_pages_read(kv, T, kind=golden.K if op == "logit" else golden.V)
    tb.check_block_reads()
    assert reads == model, f"{reads} page reads, kv_pages_read {model}"
    assert total == timing.total + latency, \
        f"{total} cycles, attention_timing {timing.total} + pe_latency {latency}"
    starts = np.array(tb.plane.stream_start)
    period = float(np.mean(np.diff(starts[1:]))) if len(starts) > 2 else 0.0
    tb.report("attention_reads", reads=reads, model_reads=model,
              blocks=int(np.count_nonzero(tb.plane.block_counts)), total=int(total),
              model_total=int(timing.total + latency), tR=tb.geometry.tR_cycles,
              transfer=int(timing.transfer.max()), compute=int(timing.compute.max()),
              period=round(period, 2), model_period=timing.period)
