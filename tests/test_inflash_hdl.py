"""In-process tests of the in-flash GEMV RTL (Amaranth simulator): parameters, gearbox, PE.

The expected values come from the golden layer: the page images from
:func:`golden.inflash.weight_pages`, the beats from the weight codes and the rule of
docs/inflash_models.md section 5.5 (rows cut into beats of ``F``, the last one padded with ``-0``),
the outputs from :func:`golden.inflash.gemv`. Page data are fed as one stream of words in read
order (the PE reads pages strictly in order); the page reads the PE issues are recorded and
checked. The cocotb testbench (cocotb_tests/inflash) adds the flash plane's timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from golden import inflash as golden
from golden.arith.float import from_float, int_to_float
from hdl.arith.format import BF16, FP16
from hdl.inflash import FlashGeometry, Gearbox, InflashPE, Mode, PEConfig
from memwall import registry
from memwall.params import ParameterError

from .stream_sim import run_streams

GEOMETRY = dict(page_bytes=64, transfer_bytes=4, fmacs=2, pages_per_block=8, blocks=8)
MAX = dict(max_rows=64, max_cols=64, group_size=16)
_FMT = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}


def _pe(**overrides) -> InflashPE:
    geo = {k: overrides.pop(k) for k in list(overrides) if k in GEOMETRY}
    return InflashPE(geometry=FlashGeometry(**{**GEOMETRY, **geo}), **{**MAX, **overrides})


# --- parameters ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    ({"fmacs": 12}, ValueError, "FMAC count must be a power of two between 1 and 16, not 12"),
    ({"transfer_bytes": 128, "page_bytes": 256}, ValueError,
     "Transfer width in bytes per cycle must be a power of two between 1 and 64, not 128"),
    ({"max_rows": 3}, ValueError,
     "Maximum row count must be a power of two between 1 and 1048576, not 3"),
    ({"max_cols": 1}, ValueError,
     "Maximum column count must be a power of two between 2 and 65536, not 1"),
    ({"max_cols": 1 << 17}, ValueError,
     "Maximum column count must be a power of two between 2 and 65536, not 131072"),
    ({"max_rows": 4.0}, TypeError, "Maximum row count must be an integer power of two"),
    ({"group_size": 48}, ValueError,
     "Group size must be a power of two between 16 and 1024, not 48"),
])
def test_parameter_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        _pe(**kwargs)


def test_geometry_must_be_a_flash_geometry():
    with pytest.raises(TypeError, match="Plane geometry must be a FlashGeometry, not 4096"):
        PEConfig(geometry=4096, max_rows=4, max_cols=4)
    with pytest.raises(TypeError, match="Gearbox configuration must be a PEConfig"):
        Gearbox(FlashGeometry())


def test_registry_reports_parameter_errors():
    block = registry.get("inflash")
    with pytest.raises(ParameterError, match="Maximum column count must be a power of two"):
        block.parameters("small", {"max_cols": "48"})
    with pytest.raises(ParameterError, match="Read time tR_us must be a positive number"):
        block.parameters("small", {"tR_us": "0"})
    assert block.parameters("paper").fmacs == 16
    assert block.parameters("default").fmacs == 2


# --- stimulus from the golden layer --------------------------------------------------------------

def _weights(mode: str, rows: int, cols: int, rng, group: int = 16) -> golden.Weights:
    if mode == "w4a16":
        shape = (rows, cols // group)
        return golden.Weights(mode, rng.integers(0, 16, (rows, cols)),
                              from_float(rng.uniform(2 ** -8, 0.2, shape), FP16),
                              from_float(rng.uniform(-1.5, 0.5, shape), FP16), group)
    if mode == "w8a8":
        codes = rng.integers(-128, 128, (rows, cols))
        codes.flat[0] = -128                       # the extreme product 2**14
        return golden.Weights(mode, codes)
    codes = from_float(rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-8, 8, (rows, cols)),
                       _FMT[mode])
    return golden.Weights(mode, codes)


def _x(mode: str, cols: int, rng) -> np.ndarray:
    if mode == "w8a8":
        x = rng.integers(-128, 128, cols)
        x[0] = -128
        return x
    return from_float(rng.standard_normal(cols), _FMT[mode])


def _words(pages: np.ndarray, size: int, W: int) -> list[dict]:
    """The page stream the plane sends: each page's used bytes, ``W`` per word, ``last`` per
    page; the last page stops at the word holding the stream's last byte."""
    out = []
    P = pages.shape[1]
    for k, page in enumerate(pages):
        used = min(P, size - k * P)
        n = -(-used // W)
        out += [{"data": [int(b) for b in page[j * W:(j + 1) * W]], "last": int(j == n - 1)}
                for j in range(n)]
    return out


def _x_beats(x: np.ndarray, F: int) -> list[dict]:
    padded = np.zeros(-(-len(x) // F) * F, np.int64)
    padded[:len(x)] = np.asarray(x, np.int64) & 0xFFFF
    padded[len(x):] = 0x7E00                        # a NaN in the unused lanes: must be ignored
    return [{"data": [int(v) for v in padded[b * F:(b + 1) * F]]}
            for b in range(len(padded) // F)]


class _Job:
    """One GEMV: weights, x, first page, and the page images the plane holds."""

    def __init__(self, cfg: PEConfig, mode: str, rows: int, cols: int, page: int, rng):
        self.mode, self.rows, self.cols, self.page = mode, rows, cols, page
        self.weights = _weights(mode, rows, cols, rng, cfg.group_size)
        self.x = _x(mode, cols, rng)
        self.size = golden.stream_bytes(mode, rows, cols, group_size=cfg.group_size)
        self.pages = golden.weight_pages(self.weights, page_bytes=cfg.page_bytes)
        self.words = _words(self.pages, self.size, cfg.transfer_bytes)

    def cmd(self) -> dict:
        return {"mode": Mode[self.mode.upper()], "rows": self.rows, "cols": self.cols,
                "page": self.page}

    def reads(self, P: int) -> list[dict]:
        n = len(self.pages)
        return [{"page": self.page + k, "bytes": min(P, self.size - k * P)} for k in range(n)]

    def y(self) -> list[int]:
        y = golden.gemv(self.weights, self.x)
        return [int(v) & 0xFFFFFFFF for v in y]


def _run(pe: InflashPE, jobs, refused=(), *, seed=0, idle=0.3, stall=0.3):
    """Run ``jobs`` (and refused commands after them) through ``pe``; check every output."""
    cfg = pe.cfg
    inputs = {"cmd": [j.cmd() for j in jobs] + list(refused),
              "x": [b for j in jobs for b in _x_beats(j.x, cfg.fmacs)],
              "rd_data": [w for j in jobs for w in j.words]}
    want_y = [(v, int(i == j.rows - 1), 0) for j in jobs for i, v in enumerate(j.y())]
    want_y += [(0, 1, 1)] * len(refused)
    want_reads = [r for j in jobs for r in j.reads(cfg.page_bytes)]
    got, cycles = run_streams(pe, inputs, {"y": ["value", "last", "error"],
                                           "rd_cmd": ["page", "bytes"]},
                              done=lambda r: len(r["y"]) >= len(want_y), seed=seed, idle=idle,
                              stall=stall)
    assert got["rd_cmd"] == want_reads
    got_y = [(o["value"], o["last"], o["error"]) for o in got["y"]]
    for index, (g, w) in enumerate(zip(got_y, want_y)):
        assert g == w, f"y[{index}]: got {g[0]:#010x} last {g[1]} error {g[2]}, " \
                       f"want {w[0]:#010x} last {w[1]} error {w[2]}"
    assert len(got_y) == len(want_y)
    return cycles


# --- gearbox ---------------------------------------------------------------------------------

def _expected_beats(weights: golden.Weights, F: int) -> list[dict]:
    """Beats of docs/inflash_models.md 5.5 from the codes: F elements of one row, padded;
    w4a16: per group g / F beats of codes, the first carrying the scale and offset."""
    pad = 0 if weights.mode == "w8a8" else 0x8000
    out = []
    if weights.mode == "w4a16":
        g, G = weights.group_size, weights.groups
        for r in range(weights.rows):
            for j in range(G):
                for k in range(g // F):
                    b = j * (g // F) + k
                    end = j == G - 1 and k == g // F - 1
                    beat = {"header": int(k == 0), "data": [int(v) for v in
                                                            weights.codes[r, b * F:(b + 1) * F]],
                            "mask": (1 << F) - 1, "beat": b, "last": int(end),
                            "group_end": int(k == g // F - 1),
                            "final": int(end and r == weights.rows - 1)}
                    if k == 0:
                        beat.update(scale=int(weights.scales[r, j]),
                                    offset=int(weights.offsets[r, j]))
                    out.append(beat)
        return out
    codes = np.asarray(weights.codes, np.int64) & (0xFF if weights.mode == "w8a8" else 0xFFFF)
    for r in range(weights.rows):
        nb = -(-weights.cols // F)
        for b in range(nb):
            lanes = list(codes[r, b * F:(b + 1) * F])
            n = len(lanes)
            out.append({"data": [int(v) for v in lanes] + [pad] * (F - n),
                        "mask": (1 << n) - 1, "beat": b, "first": int(b == 0),
                        "last": int(b == nb - 1),
                        "final": int(b == nb - 1 and r == weights.rows - 1)})
    return out


@pytest.mark.parametrize("fmacs, transfer, mode, rows, cols", [
    (2, 4, "fp16", 3, 5),          # 30 bytes: odd rows straddle words, a partial last page
    (2, 4, "fp16", 4, 16),         # two full pages
    (4, 1, "bf16", 5, 13),         # rows straddle pages, byte-wide transfers
    (4, 8, "w8a8", 7, 9),          # 63 bytes, one partial page, 8-byte words
    (1, 16, "w8a8", 2, 64),        # a row is two pages, F = 1
    (16, 4, "fp16", 3, 40),        # F = 16: beats of 32 bytes from 4-byte words
    (2, 4, "w4a16", 3, 48),        # records of 12 bytes: 8 beats of 2 codes, header on the 1st
    (1, 8, "w4a16", 2, 32),        # F = 1: beats of one nibble
    (16, 1, "w4a16", 3, 16),       # F = 16: one code beat per group, byte-wide words
])
def test_gearbox_beats_match_the_layout(fmacs, transfer, mode, rows, cols):
    cfg = PEConfig(geometry=FlashGeometry(**{**GEOMETRY, "fmacs": fmacs,
                                            "transfer_bytes": transfer}), **MAX)
    fields = ["data", "mask", "beat", "first", "last", "final", "header", "group_end", "scale",
              "offset"]
    rng = np.random.default_rng(rows * cols)
    jobs = [_Job(cfg, mode, rows, cols, 0, rng), _Job(cfg, "fp16", 2, 3, 0, rng)]
    want = [b for j in jobs for b in _expected_beats(j.weights, fmacs)]
    inputs = {"job": [{"mode": Mode[j.mode.upper()], "rows": j.rows, "cols": j.cols,
                       "bytes": j.size} for j in jobs],
              "i": [w for j in jobs for w in j.words]}
    got, _ = run_streams(Gearbox(cfg), inputs, {"o": fields},
                         done=lambda r: len(r["o"]) >= len(want), seed=fmacs)
    assert len(got["o"]) == len(want)
    for index, (g, w) in enumerate(zip(got["o"], want)):
        assert {k: g[k] for k in w} == w, f"beat {index}: got {g}, want {w}"


def test_gearbox_takes_a_word_and_gives_a_beat_every_cycle():
    """Balanced rates (fp16, F = 2, W = 4): no idle, no stall, one beat per cycle throughout."""
    cfg = PEConfig(geometry=FlashGeometry(**GEOMETRY), **MAX)
    job = _Job(cfg, "fp16", 8, 16, 0, np.random.default_rng(1))
    want = len(_expected_beats(job.weights, 2))
    assert want == len(job.words) == 64
    got, cycles = run_streams(Gearbox(cfg), {"job": [{"mode": 0, "rows": 8, "cols": 16,
                                                      "bytes": 256}],
                                             "i": job.words},
                              {"o": ["final"]}, done=lambda r: len(r["o"]) >= want,
                              idle=0.0, stall=0.0)
    # Cycle 0 takes the job, cycle 1 the first word, cycle 2 gives the first beat.
    assert cycles == want + 2


# --- the PE --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fp16", "bf16", "w8a8"])
def test_pe_matches_golden(mode):
    pe = _pe()
    rng = np.random.default_rng(Mode[mode.upper()] + 10)
    cfg = pe.cfg
    jobs = [_Job(cfg, mode, 4, 16, 3, rng),        # exactly two pages
            _Job(cfg, mode, 5, 13, 0, rng),        # rows straddle pages, odd columns
            _Job(cfg, mode, 1, 1, 63, rng),        # one element on the plane's last page
            _Job(cfg, mode, 3, 64, 10, rng)]       # rows of one (fp16) or half a page
    _run(pe, jobs, seed=Mode[mode.upper()])


@pytest.mark.parametrize("fmacs, transfer", [(2, 4), (1, 1), (16, 8)])
def test_pe_w4a16_matches_golden(fmacs, transfer):
    """Records of 12 bytes straddle pages; rows of 1 to 4 groups; x arrives with idle cycles
    while the group sums are computed; a w4a16 GEMV after a float and an integer one."""
    pe = _pe(fmacs=fmacs, transfer_bytes=transfer)
    cfg = pe.cfg
    rng = np.random.default_rng(40 + fmacs)
    jobs = [_Job(cfg, "w4a16", 1, 16, 0, rng),       # the next GEMV's X are computed while
            _Job(cfg, "w4a16", 1, 32, 2, rng),       # this one's only row is in the adders
            _Job(cfg, "w4a16", 3, 16, 0, rng), _Job(cfg, "w4a16", 5, 48, 1, rng),
            _Job(cfg, "fp16", 2, 5, 9, rng), _Job(cfg, "w4a16", 2, 64, 12, rng),
            _Job(cfg, "w8a8", 2, 7, 20, rng), _Job(cfg, "w4a16", 1, 32, 63, rng)]
    _run(pe, jobs, [{"mode": Mode.W4A16, "rows": 1, "cols": 24, "page": 0}], seed=fmacs)


def test_int4_codes_convert_like_golden():
    from hdl.inflash.pe import _INT4_FP16
    assert _INT4_FP16 == [int(c) for c in int_to_float(np.arange(16), 5, FP16)]


def test_pe_mixes_modes_and_refuses_bad_commands():
    """Modes alternate between the float and integer paths (results stay in order); refused
    commands answer one error word after everything before them."""
    pe = _pe(fmacs=4, transfer_bytes=8)
    cfg = pe.cfg
    rng = np.random.default_rng(3)
    jobs = [_Job(cfg, "w8a8", 3, 7, 0, rng), _Job(cfg, "fp16", 6, 3, 5, rng),
            _Job(cfg, "bf16", 2, 33, 9, rng), _Job(cfg, "w8a8", 9, 4, 20, rng)]
    refused = [{"mode": Mode.FP16, "rows": 0, "cols": 4, "page": 0},        # no rows
               {"mode": Mode.FP16, "rows": 1, "cols": 0, "page": 0},        # no columns
               {"mode": Mode.W8A8, "rows": 65, "cols": 4, "page": 0},       # above max_rows
               {"mode": Mode.FP16, "rows": 1, "cols": 65, "page": 0},       # above max_cols
               {"mode": Mode.W4A16, "rows": 1, "cols": 12, "page": 0},      # cols % g
               {"mode": Mode.FP16, "rows": 2, "cols": 32, "page": 63}]      # past the last page
    _run(pe, jobs, refused, seed=4)


@pytest.mark.parametrize("fmacs, transfer", [(1, 1), (16, 4), (8, 64)])
def test_pe_other_widths(fmacs, transfer):
    geometry = {"fmacs": fmacs, "transfer_bytes": transfer}
    if transfer > 64 // 2:
        geometry["page_bytes"] = 128
    pe = _pe(**geometry)
    rng = np.random.default_rng(fmacs)
    jobs = [_Job(pe.cfg, "fp16", 3, 21, 2, rng), _Job(pe.cfg, "w8a8", 2, 64, 7, rng),
            _Job(pe.cfg, "bf16", 4, 16, 30, rng)]
    _run(pe, jobs, seed=fmacs)


def test_pe_special_values():
    """Signed zeros, NaN, infinities and the tree order pins of docs section 5.1, in the PE."""
    pe = _pe(fmacs=2)
    cfg = pe.cfg
    job = _Job(cfg, "fp16", 4, 4, 0, np.random.default_rng(0))
    one, tiny, nzero = 0x3C00, 0x0C00, 0x8000      # 1.0, 2**-12 (square 2**-24), -0
    job.weights = golden.Weights("fp16", np.array([
        [one, 0, tiny, tiny],                      # 1 + 2**-23 by the tree, 1 left to right
        [nzero, nzero, nzero, nzero],              # all products -0: the sum is -0
        [0x7C00, one, 0, 0],                       # inf * 0 = NaN
        [one, 0x7E00, one, one]], np.uint16))      # NaN
    job.x = np.array([one, one, tiny, tiny], np.uint16)
    job.pages = golden.weight_pages(job.weights, page_bytes=cfg.page_bytes)
    job.words = _words(job.pages, job.size, cfg.transfer_bytes)
    assert job.y()[:2] == [0x3F800001, 0x80000000]
    _run(pe, [job], seed=9)


def test_full_rate_latency():
    """No idle cycles, no back-pressure: one GEMV whose last y leaves :attr:`latency` cycles
    after the last page word (rows of one beat: one result per cycle)."""
    pe = _pe()
    job = _Job(pe.cfg, "fp16", 16, 2, 0, np.random.default_rng(5))   # one page, 16 rows
    got, cycles = run_streams(pe, {"cmd": [job.cmd()], "x": _x_beats(job.x, 2),
                                   "rd_data": job.words},
                              {"y": ["value"]}, done=lambda r: len(r["y"]) >= 16,
                              idle=0.0, stall=0.0)
    assert [o["value"] for o in got["y"]] == job.y()
    # Cycle 0 takes the command, 1 sizes it, 2 checks it (the gearbox takes the job), x arrives
    # in cycle 3; the 16 words are offered from cycle 0 and the gearbox takes them from cycle 3,
    # one per cycle, the last in cycle 18 (16 rows of one beat, one beat per word).
    last_word = 3 + len(job.words) - 1
    assert cycles == last_word + pe.latency + 1
