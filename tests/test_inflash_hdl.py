"""In-process tests of the in-flash PE's RTL (Amaranth simulator): parameters, gearbox, GEMV,
Logit and Attend.

The expected values come from the golden layer: the page images from
:func:`golden.inflash.weight_pages` and :func:`golden.inflash.kv_pages`, the beats from the
weight codes and the rule of docs/inflash_models.md section 5.5 (rows cut into beats of ``F``,
the last one padded with ``-0``), the outputs from :func:`golden.inflash.gemv`,
:func:`golden.inflash.logit_pages` and :func:`golden.inflash.attend_pages`, the page reads of
attention from :func:`golden.inflash.kv_address` (counted by
:func:`golden.inflash.kv_pages_read`). Page data are fed as one stream of words in read order
(the PE reads pages strictly in order); the page reads the PE issues are recorded and checked.
The timing tests run the PE against the flash plane's model (cocotb_tests/inflash/plane.py) and
compare it with :func:`golden.inflash.attention_timing`; the cocotb testbench adds the plane to
every test.
"""

from __future__ import annotations

import numpy as np
import pytest


from cocotb_tests.inflash.kvstream import check_kv_write, kv_command, kv_words
from cocotb_tests.inflash.plane import PlaneModel, kv_reads, read_bytes
from golden import inflash as golden
from golden.arith.float import from_float, int_to_float
from hdl.arith.format import BF16, FP16
from hdl.inflash import FlashGeometry, Gearbox, InflashPE, Mapping, Mode, Op, PEConfig
from hdl.inflash.setup import CommandSetup
from hdl.inflash.spec import WriteError
from hdl.inflash.unit import InflashUnit
from hdl.inflash.writer import KVWriter
from memwall import registry
from memwall.params import ParameterError

from .stream_sim import _get, set_payload, run_streams, shared, simulate

GEOMETRY = dict(page_bytes=64, transfer_bytes=4, fmacs=2, pages_per_block=8, blocks=8)
MAX = dict(max_rows=64, max_cols=64, group_size=16)
_FMT = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}


def _pe(**overrides) -> InflashPE:
    """The PE with ``overrides``, one per parameter set (its simulation built once)."""
    geo = {k: overrides.pop(k) for k in list(overrides) if k in GEOMETRY}
    return shared(InflashPE, geometry=FlashGeometry(**{**GEOMETRY, **geo}),
                  **{**MAX, **overrides})


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
    ({"max_query_heads": 0}, ValueError,
     "Maximum query heads per KV head must be between 1 and 64, not 0"),
    ({"max_query_heads": 65}, ValueError,
     "Maximum query heads per KV head must be between 1 and 64, not 65"),
    ({"max_query_heads": 2.0}, TypeError,
     "Maximum query heads per KV head must be an integer between 1 and 64, not 2.0"),
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
    page; the last page stops at the word holding the stream's last byte. ``bytes``: the
    stream's bytes in the word (what the PE gives its gearbox)."""
    out = []
    P = pages.shape[1]
    for k, page in enumerate(pages):
        used = min(P, size - k * P)
        n = -(-used // W)
        out += [{"data": [int(b) for b in page[j * W:(j + 1) * W]], "last": int(j == n - 1),
                 "bytes": min(W, used - j * W)} for j in range(n)]
    return out


def _plane_words(words: list[dict]) -> list[dict]:
    """The ``rd_data`` payloads of page words (without the gearbox's ``bytes``)."""
    return [{"data": w["data"], "last": w["last"]} for w in words]


def _gearbox_words(words: list[dict]) -> list[dict]:
    """The gearbox's ``i`` payloads of page words (without the plane's ``last``)."""
    return [{"data": w["data"], "bytes": w["bytes"]} for w in words]


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
        return {"op": Op.GEMV, "mode": Mode[self.mode.upper()], "rows": self.rows,
                "cols": self.cols, "page": self.page}

    def x_beats(self, F: int) -> list[dict]:
        return _x_beats(self.x, F)

    def reads(self, P: int) -> list[dict]:
        n = len(self.pages)
        sizes = [min(P, self.size - k * P) for k in range(n)]
        return [{"page": self.page + k, "column": 0, "bytes": b, "run": b, "stride": b}
                for k, b in enumerate(sizes)]

    def y(self) -> list[int]:
        y = golden.gemv(self.weights, self.x)
        return [int(v) & 0xFFFFFFFF for v in y]

    def outputs(self) -> list[tuple[int, int, int]]:
        y = self.y()
        return [(v, int(i == len(y) - 1), 0) for i, v in enumerate(y)]


_READ_FIELDS = ["page", "column", "bytes", "run", "stride"]


def _run(pe: InflashPE, jobs, refused=(), *, seed=0, idle=0.3, stall=0.3):
    """Run ``jobs`` (GEMV or attention; then refused commands, or ``None`` in ``jobs`` for a
    refused command in place) through ``pe``; check every output and every page read."""
    cfg = pe.cfg
    jobs = list(jobs) + list(refused)
    inputs = {"cmd": [j if isinstance(j, dict) else j.cmd() for j in jobs],
              "x": [b for j in jobs if not isinstance(j, dict) for b in j.x_beats(cfg.fmacs)],
              "rd_data": [w for j in jobs if not isinstance(j, dict)
                          for w in _plane_words(j.words)]}
    want_y = [o for j in jobs for o in ([(0, 1, 1)] if isinstance(j, dict) else j.outputs())]
    want_reads = [r for j in jobs if not isinstance(j, dict) for r in j.reads(cfg.page_bytes)]
    got, cycles = run_streams(pe, inputs, {"y": ["value", "last", "error"],
                                           "rd_cmd": _READ_FIELDS},
                              done=lambda r: len(r["y"]) >= len(want_y), seed=seed, idle=idle,
                              stall=stall, max_cycles=30_000)
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
              "i": [w for j in jobs for w in _gearbox_words(j.words)]}
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
                                             "i": _gearbox_words(job.words)},
                              {"o": ["final"]}, done=lambda r: len(r["o"]) >= want,
                              idle=0.0, stall=0.0)
    # Cycle 0 takes the job, cycle 1 the first word, cycle 1 + latency (3) gives the first
    # beat, then one per cycle.
    assert Gearbox.latency == 2 and cycles == want + 1 + Gearbox.latency


# --- the PE --------------------------------------------------------------------------------

#: Tests marked ``_COCOTB`` repeat, on the small preset's PE (64-byte pages, 4-byte words, F = 2:
#: ``GEOMETRY``), what cocotb_tests/test_inflash.py's ``inflash-small`` case checks in make test
#: (random_gemvs, refused, random_attention, attention_refusals, attention_pipeline: every mode
#: and shape class, MHA and GQA in fp16, bf16 and int8 under both mappings, every refusal rule,
#: the read-bound attention timing): they run with --slow, as a quick in-process check.
_COCOTB = pytest.mark.slow


@_COCOTB
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


# --slow: 16-8 runs the w4a16 issuer, group sums and epilogue of 1-1 at F = 16, a PE that
# test_pe_other_widths[16-4] runs in make test (and the gearbox's w4a16 beats at F = 16:
# test_gearbox_beats_match_the_layout[16-1-w4a16-3-16]).
@pytest.mark.parametrize("fmacs, transfer", [pytest.param(2, 4, marks=_COCOTB), (1, 1),
                                              pytest.param(16, 8, marks=pytest.mark.slow)])
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
    _run(pe, jobs, [{"op": Op.GEMV, "mode": Mode.W4A16, "rows": 1, "cols": 24, "page": 0}],
         seed=fmacs)


def test_int4_codes_convert_like_golden():
    from hdl.inflash.issuer import _INT4_FP16
    assert _INT4_FP16 == [int(c) for c in int_to_float(np.arange(16), 5, FP16)]


# --slow: cocotb's corner_cases (modes back to back), random_gemvs and refused (every refusal rule,
# in order between GEMVs) on inflash-small (_COCOTB) run the same PE in make test.
@_COCOTB
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
               {"mode": Mode.FP16, "rows": 2, "cols": 32, "page": 63},      # past the last page
               {"op": 3, "mode": Mode.FP16, "rows": 1, "cols": 4, "page": 0}]   # no such op
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
    taken = {}
    got, cycles = run_streams(pe, {"cmd": [job.cmd()], "x": _x_beats(job.x, 2),
                                   "rd_data": _plane_words(job.words)},
                              {"y": ["value"], "rd_cmd": ["page"]},
                              done=lambda r: len(r["y"]) >= 16, idle=0.0, stall=0.0,
                              accepted_at=taken)
    assert [o["value"] for o in got["y"]] == job.y()
    # Cycle 0 takes the command, the set-up starts it gemv_cycles later, the read follows a
    # cycle after; the 16 words, offered from cycle 0, enter the read data's register once the
    # read is taken, one per cycle (16 rows of one beat, one beat per word).
    words = taken["rd_data"]
    assert words[0] > CommandSetup.gemv_cycles + 1
    assert words == list(range(words[0], words[0] + len(job.words)))
    assert cycles == words[-1] + pe.latency + 1


# --- attention: Logit and Attend on KV pages ---------------------------------------------------

#: KV layouts of the small preset (64-byte pages): 16-byte fp16 entries (``T_p = 4``) with
#: ``S = 2 L H = 8`` entries per token (naive: one token per page), and 8-byte entries with
#: ``S = 2`` (naive: four tokens of a head share a page, read as a gather).
_LAYOUT = dict(layers=2, kv_heads=2, head_dim=8)
_SHARED = dict(layers=1, kv_heads=1, head_dim=4)
_KV_FMT = {"fp16": FP16, "bf16": BF16}


class _Attention:
    """One Logit or Attend command on a random KV cache laid out from page ``base``."""

    def __init__(self, cfg: PEConfig, op: str, fmt: str, G: int, T: int, rng, *,
                 layout=None, mapping="page", layer=1, head=1, base=0, q=None, p=None,
                 keys=None, values=None):
        self.op, self.fmt, self.G, self.T, self.base = op, fmt, G, T, base
        self.layer, self.head = layer, head
        kw = layout or _LAYOUT
        self.layout = golden.KVLayout(kw["layers"], kw["kv_heads"], kw["head_dim"], fmt,
                                      page_bytes=cfg.page_bytes, mapping=mapping)
        L, H, d = self.layout.layers, self.layout.kv_heads, self.layout.head_dim
        self.kind = golden.K if op == "logit" else golden.V
        shape = (T, L, H, d)
        if fmt == "int8":
            keys = rng.integers(-128, 128, shape) if keys is None else keys
            values = rng.integers(-128, 128, shape) if values is None else values
            a = rng.integers(-128, 128, (G, d if op == "logit" else T))
        else:
            f = _KV_FMT[fmt]
            keys = from_float(rng.standard_normal(shape), f) if keys is None else keys
            values = from_float(rng.standard_normal(shape), f) if values is None else values
            a = from_float(rng.standard_normal((G, d)) if op == "logit" else
                           rng.uniform(0, 0.5, (G, T)), f)
        self.q = q if q is not None else (a if op == "logit" else None)
        self.p = p if p is not None else (a if op == "attend" else None)
        self.pages = golden.kv_pages(self.layout, keys, values)
        self._reads = kv_reads(self.layout, T, layer, head, self.kind, base)
        W = cfg.transfer_bytes
        self.words = []
        for r in self._reads:
            data = read_bytes(self.pages[r["page"] - base], r["column"], r["bytes"], r["run"],
                              r["stride"])
            n = -(-len(data) // W)
            padded = np.full(n * W, golden.ERASED, np.uint8)
            padded[:len(data)] = data
            self.words += [{"data": [int(b) for b in padded[k * W:(k + 1) * W]],
                            "last": int(k == n - 1)} for k in range(n)]

    def cmd(self) -> dict:
        mode = {"fp16": Mode.FP16, "bf16": Mode.BF16, "int8": Mode.W8A8}[self.fmt]
        return {"op": Op.LOGIT if self.op == "logit" else Op.ATTEND, "mode": mode,
                "page": self.base, "tokens": self.T, "head_dim": self.layout.head_dim,
                "query_heads": self.G, "mapping": Mapping[self.layout.mapping.upper()],
                "layers": self.layout.layers, "kv_heads": self.layout.kv_heads,
                "layer": self.layer, "head": self.head}

    def x_beats(self, F: int) -> list[dict]:
        """Logit: each head's query vector in ``ceil(d / F)`` beats; Attend: per token
        ``ceil(G / F)`` beats of ``p[:, t]``. Unused lanes hold a NaN (ignored)."""
        if self.op == "logit":
            return [b for h in range(self.G) for b in _x_beats(self.q[h], F)]
        return [b for t in range(self.T) for b in _x_beats(self.p[:, t], F)]

    def reads(self, P: int) -> list[dict]:
        return self._reads

    def outputs(self) -> list[tuple[int, int, int]]:
        if self.op == "logit":
            y = golden.logit_pages(self.layout, self.pages, self.q, self.layer, self.head,
                                   self.T).T      # token by token, the heads of a token
        else:
            y = golden.attend_pages(self.layout, self.pages, self.p, self.layer, self.head,
                                    self.T)       # head by head
        y = [int(v) & 0xFFFFFFFF for v in y.reshape(-1)]
        return [(v, int(i == len(y) - 1), 0) for i, v in enumerate(y)]


def test_accumulator_loop_is_the_golden_one():
    assert _pe().acc_loop == golden.ACC_LOOP


@_COCOTB
@pytest.mark.parametrize("op", ["logit", "attend"])
@pytest.mark.parametrize("G", [1, 2, 4])
def test_attention_matches_golden(op, G):
    """MHA and GQA, fp16 and bf16, with idle cycles and back-pressure: 12 tokens fill three
    pages exactly, 9 tokens of another head end on a partial page (in each format), then the
    naive mapping."""
    pe = _pe()
    rng = np.random.default_rng(100 + 10 * G + (op == "attend"))
    jobs = [_Attention(pe.cfg, op, "fp16", G, 12, rng, layer=1, head=1, base=3),
            _Attention(pe.cfg, op, "bf16", G, 9, rng, layer=0, head=0, base=20),
            _Attention(pe.cfg, op, "bf16", G, 12, rng, layer=0, head=1, base=30),
            _Attention(pe.cfg, op, "fp16", G, 9, rng, layer=1, head=0, base=10),
            _Attention(pe.cfg, op, "fp16", G, 5, rng, layer=1, head=0, base=40, mapping="naive")]
    _run(pe, jobs, seed=G)


@_COCOTB
@pytest.mark.parametrize("op", ["logit", "attend"])
def test_attention_int8_odd_shapes_and_gathers(op):
    """int8 KV (exact int32), three query heads over F = 2 lanes, a head dimension F does not
    divide, 6-byte entries that straddle 4-byte words; and the naive mapping with four tokens
    of the head per page (gathered reads)."""
    pe = _pe()
    rng = np.random.default_rng(7)
    odd = dict(layers=2, kv_heads=3, head_dim=5)
    jobs = [_Attention(pe.cfg, op, "int8", 3, 11, rng, layout=odd, layer=1, head=2),
            _Attention(pe.cfg, op, "fp16", 3, 7, rng, layout=dict(odd, head_dim=3), layer=0,
                       head=1, base=30, mapping="naive"),
            _Attention(pe.cfg, op, "bf16", 2, 13, rng, layout=_SHARED, layer=0, head=0,
                       base=10, mapping="naive")]
    _run(pe, jobs, seed=11)


@_COCOTB
def test_page_level_mapping_reads_fewer_pages():
    """The same Logit and Attend under both mappings, on a layout with one token of the head
    per naive page and one with four: the PE reads exactly kv_pages_read pages of each (checked
    read by read in _run), and the naive mapping needs the golden's extra reads."""
    pe = _pe()
    jobs = []
    for index, (layout, T, op) in enumerate([(_LAYOUT, 13, "logit"), (_SHARED, 19, "attend")]):
        counts = {}
        for mapping in golden.MAPPINGS:
            job = _Attention(pe.cfg, op, "fp16", 2, T, np.random.default_rng(T), layout=layout,
                             layer=0, head=0, mapping=mapping, base=32 * index)
            kind = job.kind
            counts[mapping] = len(job.reads(pe.cfg.page_bytes))
            assert counts[mapping] == golden.kv_pages_read(job.layout, T, kind=kind)
            jobs.append(job)
        page_level = golden.KVLayout(**layout, page_bytes=64)
        extra = golden.kv_pages_read(page_level.with_mapping("naive"), T, kind=kind) \
            - golden.kv_pages_read(page_level, T, kind=kind)
        assert counts["naive"] - counts["page"] == extra > 0
    _run(pe, jobs, seed=13)


def test_attend_accumulator_loop():
    """No idle cycles: an accumulator is revisited every max(G ceil(d / F), acc_loop) cycles:
    11 through the bypass from the MAC's output (G = 1, d = 22), 12 through the memory's
    transparent port (G = 2, d = 12), and shorter groups wait for the loop (d = 2, 6). The
    token order of every sum is the golden's."""
    pe = _pe()
    jobs = [_Attention(pe.cfg, "attend", "fp16", G, 9, np.random.default_rng(d),
                       layout=dict(layers=1, kv_heads=2, head_dim=d), layer=0, head=1,
                       base=8 * index)
            for index, (G, d) in enumerate([(1, 2), (1, 22), (2, 12), (2, 6)])]
    _run(pe, jobs, idle=0.0, stall=0.0)


def test_attend_order_pins_and_signed_zeros():
    """Token-order pins of docs/inflash_models.md section 8: products 1, 2**-24, 2**-24,
    2**-24 sum to exactly 1.0 (a tree would give 1 + 2**-23); -0 products only give -0."""
    pe = _pe()
    one, tiny, nzero = 0x3C00, 0x0C00, 0x8000              # 1.0, 2**-12, -0
    layout = dict(layers=1, kv_heads=1, head_dim=2)
    values = np.zeros((4, 1, 1, 2), np.uint16)
    values[:, 0, 0, 0] = [one, tiny, tiny, tiny]
    values[:, 0, 0, 1] = nzero
    p = np.array([[one, tiny, tiny, tiny], [one, nzero, one, one]], np.uint16)
    job = _Attention(pe.cfg, "attend", "fp16", 2, 4, np.random.default_rng(0), layout=layout,
                     layer=0, head=0, p=p, values=values)
    # (h, e) = (0, 0): 1.0; (0, 1): -0 products only, -0; (1, 0): 1 + 2**-11;
    # (1, 1): -0 + -0 + +0 + -0 = +0.
    assert [v for v, _, _ in job.outputs()] == [0x3F800000, 0x80000000, 0x3F801000, 0]
    _run(pe, [job], seed=5)


@_COCOTB
def test_attention_between_gemvs_and_refusals():
    """Operations back to back on every path (results in command order: an Attend's results
    leave after the earlier rows, and later commands wait for them), and each attention
    refusal rule answers one error word in order."""
    pe = _pe()
    cfg = pe.cfg
    rng = np.random.default_rng(21)
    good = _Attention(cfg, "logit", "fp16", 1, 4, rng).cmd()

    def bad(**fields):
        return {**good, **fields}

    jobs = [_Job(cfg, "fp16", 3, 5, 50, rng),
            _Attention(cfg, "attend", "fp16", 2, 6, rng, base=0),
            _Attention(cfg, "attend", "bf16", 1, 3, rng, base=20),
            _Job(cfg, "w8a8", 2, 9, 40, rng),
            _Attention(cfg, "logit", "int8", 4, 5, rng, base=30),
            bad(mode=Mode.W4A16),                               # no w4a16 KV
            _Attention(cfg, "logit", "bf16", 2, 5, rng, base=10),
            _Job(cfg, "w4a16", 2, 32, 60, rng),
            bad(tokens=0), bad(tokens=golden.MAX_TOKENS + 1),
            bad(query_heads=0), bad(query_heads=cfg.max_query_heads + 1),
            bad(head_dim=0), bad(head_dim=cfg.max_head_dim + 1),
            bad(query_heads=8, head_dim=16),                    # 8 x 8 beats > 32 x words
            bad(layers=0), bad(kv_heads=0), bad(layers=1025), bad(kv_heads=1025),
            bad(layer=2), bad(head=2),
            bad(tokens=200, page=20),                           # page-level walk past page 63
            bad(tokens=8, mapping=Mapping.NAIVE, page=60),      # naive walk past page 63
            _Attention(cfg, "attend", "int8", 3, 4, rng, base=5),
            _Job(cfg, "bf16", 2, 3, 0, rng)]
    _run(pe, jobs, seed=21)


def test_entry_larger_than_a_page_is_refused():
    """A 64-byte page holds no 33-element fp16 entry (a PE with 128 columns); 64 int8 fill
    it."""
    pe = _pe(max_cols=128)
    good = _Attention(pe.cfg, "logit", "fp16", 1, 2, np.random.default_rng(0)).cmd()
    job = _Attention(pe.cfg, "logit", "int8", 1, 3, np.random.default_rng(1),
                     layout=dict(layers=1, kv_heads=1, head_dim=64), layer=0, head=0)
    _run(pe, [{**good, "head_dim": 33}, job])


# --- attention timing against the plane ----------------------------------------------------

def _run_on_plane(dut, plane: PlaneModel, inputs: dict, outputs: dict, *, port="rd_cmd",
                  after=None, done, idle=0.0, stall=0.0, seed=0, max_cycles=20_000):
    """Run ``dut`` against the flash plane's model: ``inputs`` maps a stream to its payloads,
    ``outputs`` a stream to the fields recorded; ``port`` is the plane's command port
    (``rd_cmd`` of the PE, ``fl_cmd`` of the unit, with ``pg_data``); ``after`` maps an input
    stream to a condition on what was received before it may start. Returns the received
    ``(cycle, payload)`` pairs per output stream."""
    import random
    rng = random.Random(seed)
    W = plane.geometry.transfer_bytes
    fields = _READ_FIELDS + (["program"] if port == "fl_cmd" else [])
    received = {name: [] for name in outputs}
    after = after or {}

    async def bench(ctx):
        sent = {name: 0 for name in inputs}
        for cycle in range(max_cycles):
            if done(received):
                return
            offers = {}
            for name, items in inputs.items():
                port_ = getattr(dut, name)
                offer = (sent[name] < len(items) and after.get(name, lambda r: True)(received)
                         and rng.random() >= idle)
                ctx.set(port_.valid, int(offer))
                if offer:
                    set_payload(ctx, port_.payload, items[sent[name]])
                offers[name] = offer
            ready, word = plane.outputs()
            ctx.set(getattr(dut, port).ready, int(ready))
            ctx.set(dut.rd_data.valid, int(word is not None))
            if word is not None:
                set_payload(ctx, dut.rd_data.payload, {"data": [word[f"data.{j}"] for j in range(W)],
                                                "last": word["last"]})
            loading = port == "fl_cmd" and plane.program_ready
            if port == "fl_cmd":
                ctx.set(dut.pg_data.ready, int(loading))
            takes = {name: rng.random() >= stall for name in outputs}
            for name, take in takes.items():
                ctx.set(getattr(dut, name).ready, int(take))
            taken = {n: offers[n] and ctx.get(getattr(dut, n).ready) for n in inputs}
            read = _get(ctx, getattr(dut, port).payload, fields) \
                if ready and ctx.get(getattr(dut, port).valid) else None
            word_taken = word is not None and bool(ctx.get(dut.rd_data.ready))
            program_word = _get(ctx, dut.pg_data.payload, ["data"])["data"] \
                if loading and ctx.get(dut.pg_data.valid) else None
            delivered = {n: _get(ctx, getattr(dut, n).payload, f) for n, f in outputs.items()
                         if takes[n] and ctx.get(getattr(dut, n).valid)}
            await ctx.tick()
            plane.tick(read, word_taken, program_word)
            for name, ok in taken.items():
                sent[name] += int(bool(ok))
            for name, item in delivered.items():
                received[name].append((cycle, item))
        raise AssertionError(f"not done after {max_cycles} cycles: received "
                             + ", ".join(f"{n} {len(v)}" for n, v in received.items()))

    simulate(dut, bench)
    return received


@pytest.mark.parametrize("op, G, geo", [
    # The small preset's plane: cocotb's attention_pipeline times these on the same PE.
    *(pytest.param(op, G, {}, marks=_COCOTB) for op, G in [
        ("logit", 1), ("logit", 2), ("logit", 4),           # compute per page 16, 32, 64;
        ("attend", 1), ("attend", 4)]),                     # 44 (the loop minimum), 64
    ("attend", 2, {"fmacs": 1, "tR_us": 0.05}),             # compute-bound, F = 1
    # transfer-bound (64 words a page, a beat in 8 words): the page's compute trails its words
    ("logit", 1, {"fmacs": 4, "transfer_bytes": 1}),
    # --slow: logit-1-geo6 is the same transfer-bound plane, logit-4-geo9 the same G
    pytest.param("logit", 4, {"fmacs": 4, "transfer_bytes": 1}, marks=pytest.mark.slow),
    # a beat in two words (F = 4, W = 4): head 0 of a page's first token waits for each beat
    # as it streams, one cycle a beat (pe_latency's stall)
    # --slow: logit-4-geo9 takes the same per-beat stall, over four beats
    pytest.param("logit", 4, {"fmacs": 4}, marks=pytest.mark.slow),
    ("logit", 4, {"fmacs": 2, "transfer_bytes": 2}),        # the same, 3 cycles (4 beats)
    # --slow: attend-2-geo5 is Attend with G = 2, logit-1-geo6 the same transfer-bound plane
    pytest.param("attend", 2, {"fmacs": 4, "transfer_bytes": 1}, marks=pytest.mark.slow),
    # read-bound with F = 16 (a beat in 2 words), 128-byte pages of 8 entries; --slow:
    # attend-int8-1-geo13 and -3-geo14 time the same plane and PE, logit-1-geo6 Logit's order
    pytest.param("logit", 2, {"fmacs": 16, "transfer_bytes": 16, "page_bytes": 128},
                 marks=pytest.mark.slow),
    # --slow: attend-int8-1-geo13 and -3-geo14 run Attend on the same plane and PE, and
    # attend-2-geo5 float Attend
    pytest.param("attend", 1, {"fmacs": 16, "transfer_bytes": 16, "page_bytes": 128},
                 marks=pytest.mark.slow),
    # int8 Attend with one issue per token: every token updates the same accumulators in
    # consecutive cycles (the forwarded sum), and with three (the transparent port)
    ("attend-int8", 1, {"fmacs": 16, "transfer_bytes": 16, "page_bytes": 128}),
    ("attend-int8", 3, {"fmacs": 16, "transfer_bytes": 16, "page_bytes": 128}),
])
def test_attention_timing(op, G, geo):
    """No idle, no back-pressure, the plane's tR: the pages read are the walk's, the first
    streams tR after its read, and the total equals golden.inflash.attention_timing with
    pe_latency from the PE, cycle for cycle (40 tokens), in read-, compute- and
    transfer-bound planes."""
    op, _, fmt = op.partition("-")
    fmt = fmt or "fp16"
    geometry = FlashGeometry(**{**GEOMETRY, "tR_us": 0.1, "blocks": 16, **geo})
    pe = shared(InflashPE, geometry=geometry, **MAX)
    job = _Attention(pe.cfg, op, fmt, G, 40, np.random.default_rng(G), layer=1, head=0)
    plane = PlaneModel(geometry)
    plane.program(job.base, job.pages)
    n_out = len(job.outputs())
    got = _run_on_plane(pe, plane, {"cmd": [job.cmd()], "x": job.x_beats(geometry.fmacs)},
                        {"y": ["value", "last", "error"]}, done=lambda r: len(r["y"]) >= n_out,
                        max_cycles=4_000)
    assert [(y["value"], y["last"], y["error"]) for _, y in got["y"]] == job.outputs()
    outputs = [cycle for cycle, _ in got["y"]]
    mode = Mode.W8A8 if fmt == "int8" else Mode.FP16
    cmd_op = Op.LOGIT if op == "logit" else Op.ATTEND
    timing = golden.attention_timing(geometry, job.layout, 40, op=op, group=G, layer=1, head=0)
    latency = pe.pe_latency(mode, cmd_op, query_heads=G, head_dim=8,
                            last_page=(timing.transfer[-1], timing.compute[-1]))
    t0 = plane.read_start[0]
    assert plane.read_pages == [r["page"] for r in job.reads(geometry.page_bytes)]
    assert len(plane.read_pages) == timing.pages == golden.kv_pages_read(job.layout, 40,
                                                                         layer=1, kind=job.kind)
    assert plane.stream_start[0] - t0 == timing.tR
    assert outputs[-1] - t0 + 1 == timing.total + latency, \
        f"{op} G={G}: {outputs[-1] - t0 + 1} cycles, attention_timing {timing.total} + {latency}"


def test_attention_latency_needs_the_last_page():
    with pytest.raises(ValueError, match="The latency of LOGIT needs last_page"):
        _pe().pe_latency(Mode.FP16, Op.LOGIT, query_heads=1, head_dim=8)


# --- the KV page writer ----------------------------------------------------------------------

_WRITER_GEOMETRY = FlashGeometry(**{**GEOMETRY, "blocks": 16})
_RECORD_FIELDS = list(golden.KV_RECORD)


def _kv_cache(layout: golden.KVLayout, T: int, rng):
    shape = (T, layout.layers, layout.kv_heads, layout.head_dim)
    if layout.kv_format == "int8":
        return rng.integers(-128, 128, shape), rng.integers(-128, 128, shape)
    fmt = _KV_FMT[layout.kv_format]
    return tuple(from_float(rng.standard_normal(shape), fmt) for _ in range(2))


class _Sequence:
    """One sequence for the writer: a KV cache, its region, what the host sends."""

    def __init__(self, layout: golden.KVLayout, T: int, rng, *, page: int, pages: int,
                 entries: int | None = None, cut: int = 0, command: dict | None = None):
        self.layout, self.page, self.pages = layout, page, pages
        self.keys, self.values = _kv_cache(layout, T, rng)
        self.entries, self.cut = entries, cut
        self.command = command or kv_command(layout, page, pages)

    def words(self, W: int) -> list[dict]:
        return kv_words(self.layout, self.keys, self.values, W, entries=self.entries,
                        cut=self.cut)

    def golden(self, slots: int) -> golden.KVWrite:
        return golden.kv_write(self.layout, self.keys, self.values, pages=self.pages,
                               slots=slots, entries=self.entries)


def _run_writer(writer: KVWriter, sequences, *, seed=0, idle=0.3, stall=0.3, refused=()):
    """Run sequences through the writer alone; check programs, images, records and statuses
    against golden.inflash.kv_write (``refused``: indices of sequences refused as LAYOUT)."""
    W, P = writer.cfg.transfer_bytes, writer.cfg.page_bytes
    inputs = {"cmd": [s.command for s in sequences],
              "kv": [w for s in sequences for w in s.words(W)]}
    got, _ = run_streams(writer, inputs, {"pg_cmd": ["page"], "pg_data": ["data", "last"],
                                          "table": _RECORD_FIELDS,
                                          "status": ["entries", "error"]},
                         done=lambda r: len(r["status"]) >= len(sequences), seed=seed,
                         idle=idle, stall=stall, max_cycles=60_000)
    data = [b for w in got["pg_data"] for b in w["data"]]
    assert len(data) == len(got["pg_cmd"]) * P
    assert [w["last"] for w in got["pg_data"]] == \
        [int((i + 1) % (P // W) == 0) for i in range(len(got["pg_data"]))]
    images = np.array(data, np.uint8).reshape(-1, P)
    programs = [c["page"] for c in got["pg_cmd"]]
    at = 0
    for index, s in enumerate(sequences):
        status = got["status"][index]
        if index in refused:
            assert status == {"entries": 0, "error": WriteError.LAYOUT}, f"sequence {index}"
            continue
        want = s.golden(writer.cfg.slots)
        n = len(want.pages)
        check_kv_write(want, s.page, programs=programs[at:at + n], images=images[at:at + n],
                       records=got["table"][at:at + n], status=status,
                       where=f"sequence {index}: ")
        at += n
    assert at == len(programs), f"{len(programs) - at} programs too many"


def _layout(mapping="page", fmt="fp16", **kw):
    return golden.KVLayout(**{**_LAYOUT, **kw}, kv_format=fmt, page_bytes=64, mapping=mapping)


def test_writer_parameter_errors():
    with pytest.raises(ValueError, match="KV buffer pages must be between 1 and 4096, not 0"):
        KVWriter(geometry=_WRITER_GEOMETRY, slots=0)
    with pytest.raises(TypeError, match="Plane geometry must be a FlashGeometry"):
        KVWriter(geometry=64, slots=2)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "int8"])
def test_writer_matches_golden(fmt):
    """Page-level (S = 8 streams in 8 buffer pages) and naive (one and two buffer pages),
    sequences that fill pages exactly and end on partial pages, entries of 8, 6 (straddling
    4-byte words) and 5 bytes, idle cycles and back-pressure on every stream."""
    writer = shared(KVWriter, geometry=_WRITER_GEOMETRY, slots=8)
    rng = np.random.default_rng(3)
    seqs = [_Sequence(_layout("page", fmt), 8, rng, page=0, pages=40),          # two groups
            _Sequence(_layout("page", fmt), 5, rng, page=40, pages=40),         # partial
            _Sequence(_layout("naive", fmt), 5, rng, page=80, pages=20),
            _Sequence(_layout("page", fmt, head_dim=3), 7, rng, page=100, pages=20),
            _Sequence(_layout("naive", fmt, layers=1, kv_heads=1, head_dim=5), 9, rng,
                      page=120, pages=8)]
    _run_writer(writer, seqs, seed=len(fmt))
    naive = shared(KVWriter, geometry=_WRITER_GEOMETRY, slots=1)
    _run_writer(naive, [_Sequence(_layout("naive", fmt), 6, rng, page=3, pages=30)], seed=2)


def test_writer_programs_in_page_order_with_one_word_per_cycle():
    """No idle, no back-pressure: each page's words leave one per cycle, pages in order."""
    writer = shared(KVWriter, geometry=_WRITER_GEOMETRY, slots=8)
    seq = _Sequence(_layout(), 4, np.random.default_rng(1), page=7, pages=8)
    _run_writer(writer, [seq], idle=0.0, stall=0.0)


def test_writer_overflow_and_refusals():
    """Out of buffer (S = 8 streams, 4 buffer pages: nothing stored), out of pages (the
    stored tokens are programmed, the rest dropped), sequences ending inside a token and
    inside an entry, refused layouts; each followed by a sequence that still works."""
    writer = KVWriter(geometry=_WRITER_GEOMETRY, slots=4)
    rng = np.random.default_rng(5)
    small = _layout("page", layers=1, kv_heads=2)                     # S = 4
    bad = kv_command(small, 0, 4)
    seqs = [_Sequence(_layout(), 3, rng, page=0, pages=20),           # BUFFER: S = 8 > 4
            _Sequence(small, 6, rng, page=0, pages=6),                # PAGES: group 1 needs 8
            _Sequence(_layout("naive"), 5, rng, page=10, pages=7),    # PAGES at token 3
            _Sequence(small, 3, rng, page=20, pages=8, entries=9),    # ends inside token 2
            _Sequence(small, 3, rng, page=30, pages=8, entries=5, cut=3),   # inside an entry
            _Sequence(small, 5, rng, page=60, pages=8, entries=18),   # inside token 4, group 1
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "head_dim": 0}),
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "head_dim": 33}),
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "mode": Mode.W4A16}),
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "layers": 0}),
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "kv_heads": 1025}),
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "pages": 0}),
            _Sequence(small, 1, rng, page=40, pages=4, command={**bad, "page": 126}),
            _Sequence(small, 4, rng, page=50, pages=8)]
    want = [s.golden(4) for s in seqs[:6]]
    assert want[0].error == "buffer" and want[0].entries == 0
    assert want[1].error == "pages" and want[1].entries == 4 * 4
    assert want[2].error == "pages" and want[2].entries == 3 * 8
    assert (want[3].error, want[3].entries) == (None, 9)
    assert want[5].table["entries"].tolist() == [4] * 4 + [1, 1]
    _run_writer(writer, seqs, refused=range(6, 13), seed=7)


def _unit_geometry() -> FlashGeometry:
    """The small plane with tP = 0.5 us (200 cycles, 5 tR): programs cost time, tests stay
    short."""
    return FlashGeometry(**{**GEOMETRY, "tR_us": 0.1, "tP_us": 0.5, "blocks": 16})


#: Both run with --slow (fp16 with GQA 44 s, int8 14 s, loaded machine): cocotb's kv_write_read
#: on inflash-unit-small (make test, Icarus) writes fp16, bf16 and int8 sequences through the same
#: unit under both mappings and reads them back by Logit and Attend, MHA and GQA, the pages,
#: mapping table, statuses and block read counts checked against the same golden functions.
@pytest.mark.parametrize("fmt, G", [pytest.param("fp16", 2, marks=pytest.mark.slow),
                                    pytest.param("int8", 1, marks=pytest.mark.slow)])
def test_unit_reads_back_what_the_writer_wrote(fmt, G):
    """Sequences written through the writer under both mappings (programs with tP busy on the
    plane's shared port), then Logit and Attend on them, MHA and GQA: every result is the
    golden's on the original K and V; the pages programmed, their images, the mapping table
    and the statuses are kv_write's; the pages read are the walk's, the naive mapping reads
    kv_pages_read's extra pages, and the per-block read counters are block_reads'."""
    geometry = _unit_geometry()
    unit = InflashUnit(geometry=geometry, **MAX, kv_slots=8)
    cfg = unit.cfg
    rng = np.random.default_rng(31 + G)
    page_level = _Sequence(_layout("page", fmt), 9, rng, page=0, pages=32)
    naive = _Sequence(_layout("naive", fmt), 9, rng, page=40, pages=24)
    seqs = [page_level, naive]

    def job(op, seq, layer, head, group=G):
        return _Attention(cfg, op, fmt, group, 9, rng, layout=_LAYOUT,
                          mapping=seq.layout.mapping, layer=layer, head=head, base=seq.page,
                          keys=seq.keys, values=seq.values)

    jobs = [job("logit", page_level, 1, 1), job("logit", naive, 1, 1),
            job("attend", page_level, 0, 1), job("attend", naive, 1, 0, group=3)]
    plane = PlaneModel(geometry)
    n_out = sum(len(j.outputs()) for j in jobs)
    got = _run_on_plane(
        unit, plane,
        {"kv_cmd": [s.command for s in seqs], "kv": [w for s in seqs for w in s.words(4)],
         "cmd": [j.cmd() for j in jobs], "x": [b for j in jobs for b in j.x_beats(2)]},
        {"y": ["value", "last", "error"], "kv_table": _RECORD_FIELDS,
         "kv_status": ["entries", "error"]},
        port="fl_cmd", after={"cmd": lambda r: len(r["kv_status"]) == len(seqs)},
        done=lambda r: len(r["y"]) >= n_out, idle=0.2, stall=0.2, seed=G, max_cycles=40_000)
    at = 0
    for index, s in enumerate(seqs):
        want = s.golden(8)
        n = len(want.pages)
        check_kv_write(want, s.page, programs=plane.program_pages[at:at + n],
                       images=[plane.pages[s.page + int(p)] for p in want.pages],
                       records=[r for _, r in got["kv_table"][at:at + n]],
                       status=got["kv_status"][index][1], where=f"sequence {index}: ")
        at += n
    want_y = [o for j in jobs for o in j.outputs()]
    assert [(y["value"], y["last"], y["error"]) for _, y in got["y"]] == want_y
    reads = [r["page"] for j in jobs for r in j.reads(cfg.page_bytes)]
    assert plane.read_pages == reads
    assert np.array_equal(plane.block_counts, golden.block_reads(geometry, np.array(reads)))
    counts = [sum(1 for p in plane.read_pages if s.page <= p < s.page + s.pages)
              for s in seqs]
    logit = [golden.kv_pages_read(s.layout, 9, layer=1, head=1) for s in seqs]
    attend = [golden.kv_pages_read(page_level.layout, 9, layer=0, head=1, kind=golden.V),
              golden.kv_pages_read(naive.layout, 9, layer=1, head=0, kind=golden.V)]
    assert counts == [logit[0] + attend[0], logit[1] + attend[1]]
    # Page-level: ceil(T / T_p) pages; naive: one page per token (S = 8 >= T_p).
    assert logit == [-(-9 // page_level.layout.tokens_per_page), 9]
    # Each program kept the plane busy for tP after its last word.
    assert all(end - start >= geometry.tP_cycles
               for start, end in zip(plane.program_start, plane.program_end))
