"""Tests of golden.inflash: hand-computed cases first (geometry, byte layouts, sums, mappings,
cycle counts), then the documented operation orders re-implemented with scalar loops, then the
float64 and exact-integer references with the error bounds, then pinned error messages.

Expected values come from hand computation (written out in the comments), from NumPy's own float
conversions, or from independent scalar re-implementations of docs/inflash_models.md; none is
copied from the model's output.
"""

import numpy as np
import pytest

import golden.inflash as fl
from golden.arith.float import fadd, fconvert, fdot, fmul, from_float, int_to_float
from golden.arith.idot import pairwise_reduce
from golden.inflash.params import _values
from hdl.arith.format import BF16, FP16, FP32

ONE = 0x3F800000
NAN32 = 0x7FC00000
T24 = 2.0 ** -12          # an fp16/bf16 normal whose square is 2**-24, half an fp32 ulp of 1


def codes(values, fmt=FP16) -> np.ndarray:
    """fp16/bf16 codes of values the format holds exactly (checked)."""
    x = np.asarray(values, dtype=np.float64)
    c = from_float(x, fmt)
    back = _values(c, fmt)
    assert np.array_equal(back, x) and np.array_equal(np.signbit(back), np.signbit(x))
    return c


def f32(value) -> int:
    """The fp32 code of a value (NumPy's own rounding; used for exactly representable sums)."""
    return int(np.float32(value).view(np.uint32))


def as_f64(c) -> np.ndarray:
    return np.asarray(c, dtype=np.uint32).view(np.float32).astype(np.float64)


def tree(values, combine):
    """The pairwise order, written plainly: neighbours in pairs, an odd last value carried up."""
    level = list(values)
    while len(level) > 1:
        nxt = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def add32(a, b):
    return int(fadd(np.uint32(a), np.uint32(b), FP32))


def random_weights(rng, mode, rows, cols, group=16):
    if mode == "w8a8":
        return fl.Weights(mode, rng.integers(-128, 128, (rows, cols)))
    if mode == "w4a16":
        groups = cols // group
        return fl.Weights(mode, rng.integers(0, 16, (rows, cols)),
                          from_float(0.05 * rng.random((rows, groups)) + 0.01, FP16),
                          from_float(-0.4 * rng.random((rows, groups)), FP16), group)
    fmt = FP16 if mode == "fp16" else BF16
    scale = np.exp2(rng.integers(-6, 7, (rows, cols)))
    return fl.Weights(mode, from_float(rng.standard_normal((rows, cols)) * scale, fmt))


def random_x(rng, mode, cols):
    if mode == "w8a8":
        return rng.integers(-128, 128, cols)
    return from_float(rng.standard_normal(cols), BF16 if mode == "bf16" else FP16)


# --- geometry and busy times ----------------------------------------------------------------------


def test_busy_cycles_round_up_on_exact_decimals():
    assert fl.busy_cycles(4, 400) == 1600                 # the paper's tR at 400 MHz
    assert fl.busy_cycles(75, 400) == 30000               # the paper's tP
    assert fl.busy_cycles(0.07, 100) == 7                 # 0.07 * 100 is 7.000000000000001
    assert fl.busy_cycles(0.035, 400) == 14               # 0.035 * 400 is 14.000000000000002
    assert fl.busy_cycles(0.01, 150) == 2                 # 1.5 cycles: never shortened to 1
    assert fl.busy_cycles(1e-9, 400) == 1                 # any busy time lasts at least a cycle
    assert fl.busy_cycles(np.float64(2.5), 100) == 250


def test_geometry_defaults_and_paper():
    g = fl.FlashGeometry()
    assert (g.page_bytes, g.tR_cycles, g.tP_cycles, g.page_transfer_cycles) == (4096, 1600,
                                                                                30000, 1024)
    assert (g.fmacs, g.pages_per_block, g.blocks, g.pages) == (2, 768, 177, 768 * 177)
    assert fl.FlashGeometry.paper().fmacs == 16
    assert fl.FlashGeometry(tR_us=0.0125, clk_mhz=200, transfer_bytes=16).tR_cycles == 3


# --- byte layouts ---------------------------------------------------------------------------------


def test_fp16_layout_by_hand():
    # 3 x 5 codes 0xAB0C with A = row + 1, C = column: 30 bytes, two 16-byte pages; row 1 is
    # bytes 10..19 and straddles the page boundary; the last two bytes are erased.
    w = np.array([[0x1000 * (r + 1) + c for c in range(5)] for r in range(3)], dtype=np.uint16)
    pages = fl.weight_pages(fl.Weights("fp16", w), page_bytes=16)
    stream = []
    for r in range(3):
        for c in range(5):
            stream += [c, 0x10 * (r + 1)]
    assert pages.dtype == np.uint8 and pages.shape == (2, 16)
    assert pages.reshape(-1).tolist() == stream + [0xFF, 0xFF]
    assert fl.page_count("fp16", 3, 5, page_bytes=16) == 2
    assert fl.stream_bytes("fp16", 3, 5) == 30


def test_w8a8_layout_by_hand():
    pages = fl.weight_pages(fl.Weights("w8a8", np.array([[-1, 2, -128]])), page_bytes=16)
    assert pages.tolist() == [[0xFF, 0x02, 0x80] + [0xFF] * 13]
    back = fl.weights_from_pages(pages, "w8a8", 1, 3)
    assert back.codes.tolist() == [[-1, 2, -128]] and back.codes.dtype == np.int8


def w4a16_hand():
    """One row of 32 int4 codes in two groups of 16: scales 1.0, 0.5, offsets -1, 2."""
    q = np.array([list(range(16)) + list(range(15, -1, -1))])
    return fl.Weights("w4a16", q, np.array([[0x3C00, 0x3800]]), np.array([[0xBC00, 0x4000]]), 16)


def test_w4a16_layout_by_hand():
    rec0 = [0x00, 0x3C, 0x00, 0xBC, 0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]
    rec1 = [0x00, 0x38, 0x00, 0x40, 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01]
    pages = fl.weight_pages(w4a16_hand(), page_bytes=16)
    assert pages.tolist() == [rec0 + rec1[:4], rec1[4:] + [0xFF] * 8]
    assert fl.stream_bytes("w4a16", 1, 32, group_size=16) == 24


def test_stream_sizes_of_a_7b_layer():
    assert fl.page_count("fp16", 4096, 4096) == 8192               # 32 MiB of 4 KiB pages
    assert fl.page_count("bf16", 4096, 11008) == 22016
    assert fl.page_count("w8a8", 4096, 4096) == 4096
    # 32 records of 4 + 64 bytes per row: 4096 * 32 * 68 = 8912896 bytes = 2176 pages.
    assert fl.stream_bytes("w4a16", 4096, 4096, group_size=128) == 8912896
    assert fl.page_count("w4a16", 4096, 4096, group_size=128) == 2176


@pytest.mark.parametrize("mode,rows,cols,page", [
    ("fp16", 4, 16, 64), ("fp16", 3, 7, 64), ("bf16", 2, 64, 16), ("bf16", 5, 33, 32),
    ("w8a8", 8, 16, 64), ("w8a8", 3, 21, 16), ("w4a16", 16, 32, 64), ("w4a16", 5, 48, 32)])
def test_layout_round_trip_and_erased_tail(mode, rows, cols, page):
    rng = np.random.default_rng(rows * cols)
    w = random_weights(rng, mode, rows, cols)
    pages = fl.weight_pages(w, page_bytes=page)
    size = fl.stream_bytes(mode, rows, cols, group_size=16)
    assert pages.shape == (-(-size // page), page)
    assert pages.shape[0] == fl.page_count(mode, rows, cols, group_size=16, page_bytes=page)
    assert (pages.reshape(-1)[size:] == fl.ERASED).all()
    back = fl.weights_from_pages(pages, mode, rows, cols, group_size=16)
    assert np.array_equal(back.codes, w.codes) and back.codes.dtype == w.codes.dtype
    if mode == "w4a16":
        assert np.array_equal(back.scales, w.scales) and np.array_equal(back.offsets, w.offsets)


def test_exact_fill_has_no_tail():
    # 4 x 16 fp16 codes 0 .. 63: 128 bytes, exactly two 64-byte pages, the last byte pair data.
    w = fl.Weights("fp16", np.arange(64).reshape(4, 16))
    pages = fl.weight_pages(w, page_bytes=64)
    assert pages.shape == (2, 64) and pages[-1, -2:].tolist() == [63, 0]
    assert pages[0, :4].tolist() == [0, 0, 1, 0]


# --- GEMV: hand-computed cases --------------------------------------------------------------------


@pytest.mark.parametrize("fmt,mode", [(FP16, "fp16"), (BF16, "bf16")])
def test_gemv_small_by_hand(fmt, mode):
    w = fl.Weights(mode, codes([[1, 2, 3], [0.5, -1, 4]], fmt))
    y = fl.gemv(w, codes([1, 1, 2], fmt))
    assert y.dtype == np.uint32 and y.tolist() == [f32(9.0), f32(7.5)]


@pytest.mark.parametrize("fmt,mode", [(FP16, "fp16"), (BF16, "bf16")])
def test_gemv_tree_order_by_hand(fmt, mode):
    t = T24 * T24                                            # 2**-24, exact products in fp32

    def row(weights, xs):
        return int(fl.gemv(fl.Weights(mode, codes([weights], fmt)), codes(xs, fmt))[0])

    # (1 + 0) + (t + t) = 1 + 2**-23; left to right, 1 + t rounds back to 1 (ties to even) twice.
    assert row([1, 0, T24, T24], [1, 1, T24, T24]) == 0x3F800001
    # Odd counts: (t + t) + 1 = 1 + 2**-23, but (1 + t) + t = 1: the last value is carried up.
    assert row([T24, T24, 1], [T24, T24, 1]) == 0x3F800001
    assert row([1, T24, T24], [1, T24, T24]) == ONE
    # Six values: ((1 + 0) + (0 + 0)) + (t + t).
    assert row([1, 0, 0, 0, T24, T24], [1, 1, 1, 1, T24, T24]) == 0x3F800001
    assert 1 + 2 * t == as_f64(0x3F800001)


def test_gemv_signed_zero():
    # Every product -0: the sum is -0 (so padding beats with -0 products changes nothing).
    assert fl.gemv(fl.Weights("fp16", codes([[-0.0, -0.0, -0.0]])), codes([1, 1, 1])).tolist() \
        == [0x80000000]
    assert fl.gemv(fl.Weights("fp16", codes([[-0.0, 0.0]])), codes([1, 1])).tolist() == [0]


def test_gemv_nan_and_infinity():
    nan = np.array([0x7E00], np.uint16)
    w = fl.Weights("fp16", codes([[1, 2], [0, 0]]))
    assert fl.gemv(w, np.concatenate([codes([1]), nan])).tolist() == [NAN32, NAN32]
    inf = fl.gemv(fl.Weights("fp16", codes([[0.0, 1]])), np.array([0x7C00, 0x3C00]))   # 0 * inf
    assert inf.tolist() == [NAN32]


def test_gemv_w8a8_by_hand():
    y = fl.gemv(fl.Weights("w8a8", np.array([[127, -128], [1, 2]])), np.array([-128, 127]))
    assert y.dtype == np.int32 and y.tolist() == [127 * -128 - 128 * 127, -128 + 254]
    # The largest sum: 2**16 columns of (-128) * (-128) = 2**30, inside int32.
    big = fl.Weights("w8a8", np.full((1, fl.MAX_COLS), -128, np.int8))
    assert fl.gemv(big, np.full(fl.MAX_COLS, -128)).tolist() == [1 << 30]


def test_gemv_w4a16_by_hand():
    # Group 0: D = 0 + 1 + ... + 15 = 120, X = 16, t = 1.0 * 120 + (-1) * 16 = 104.
    # Group 1: D = 120, X = 16, t = 0.5 * 120 + 2 * 16 = 92.  y = 104 + 92 = 196.
    w = w4a16_hand()
    x = codes([1.0] * 32)
    assert fl.group_sums(x, 16).tolist() == [f32(16), f32(16)]
    assert fl.gemv(w, x).tolist() == [f32(196)]
    # With x = 0.5 in group 0 and 2 in group 1: t0 = 60 - 8 = 52, t1 = 0.5 * 240 + 2 * 32 = 184.
    x2 = codes([0.5] * 16 + [2.0] * 16)
    assert fl.gemv(w, x2).tolist() == [f32(236)]
    assert fl.gemv_reference(w, x2).tolist() == [236.0]


# --- GEMV: the documented order, re-implemented ---------------------------------------------------


def gemv_scalar(w: fl.Weights, x) -> list[int]:
    """docs/inflash_models.md section 5, one scalar operation at a time."""
    out = []
    if w.mode in ("fp16", "bf16"):
        fmt = FP16 if w.mode == "fp16" else BF16
        for r in range(w.rows):
            prods = [int(fmul(w.codes[r, k], x[k], fmt, fmt, FP32)) for k in range(w.cols)]
            out.append(tree(prods, add32))
        return out
    g = w.group_size
    big_x = [tree([int(fconvert(x[k], FP16, FP32)) for k in range(j * g, (j + 1) * g)], add32)
             for j in range(w.groups)]
    for r in range(w.rows):
        terms = []
        for j in range(w.groups):
            prods = [int(fmul(int_to_float(w.codes[r, k], 5, FP16), x[k], FP16, FP16, FP32))
                     for k in range(j * g, (j + 1) * g)]
            d = tree(prods, add32)
            scaled = int(fmul(w.scales[r, j], np.uint32(d), FP16, FP32, FP32))
            shifted = int(fmul(w.offsets[r, j], np.uint32(big_x[j]), FP16, FP32, FP32))
            terms.append(add32(scaled, shifted))
        out.append(tree(terms, add32))
    return out


@pytest.mark.parametrize("mode,rows,cols", [
    ("fp16", 3, 1), ("fp16", 3, 37), ("fp16", 2, 64), ("bf16", 3, 21), ("bf16", 2, 48),
    ("w4a16", 3, 48), ("w4a16", 2, 64)])
def test_gemv_matches_scalar_order(mode, rows, cols):
    rng = np.random.default_rng(cols)
    w = random_weights(rng, mode, rows, cols)
    x = random_x(rng, mode, cols)
    assert fl.gemv(w, x).tolist() == gemv_scalar(w, x)


@pytest.mark.parametrize("mode", ["fp16", "bf16"])
@pytest.mark.parametrize("cols", [1, 3, 16, 37, 64])
def test_gemv_does_not_depend_on_fmacs(mode, cols):
    # An F-lane FloatDot per beat (the last beat padded with weight -0, x +0: product -0), then
    # the pairwise tree over the beat sums: the same bits for every F.
    fmt = FP16 if mode == "fp16" else BF16
    rng = np.random.default_rng(7 * cols)
    w = random_weights(rng, mode, 4, cols)
    x = random_x(rng, mode, cols)
    want = fl.gemv(w, x)
    for f in (1, 2, 4, 8, 16):
        assert np.array_equal(fl.gemv(w, x, fmacs=f), want)
        nb = -(-cols // f)
        wp = np.full((4, nb * f), 0x8000, np.uint16)
        wp[:, :cols] = w.codes
        xp = np.zeros(nb * f, np.uint16)
        xp[:cols] = x
        beats = fdot(wp.reshape(4, nb, f), np.broadcast_to(xp.reshape(nb, f), (4, nb, f)), fmt)
        assert [tree(list(b), add32) for b in beats] == want.tolist(), f


def test_left_to_right_beat_accumulation_would_differ():
    # The test above can fail: accumulating the beat sums left to right gives other bits.
    rng = np.random.default_rng(3)
    w = random_weights(rng, "fp16", 8, 64)
    x = random_x(rng, "fp16", 64)
    beats = fdot(w.codes.reshape(8, 16, 4), np.broadcast_to(x.reshape(16, 4), (8, 16, 4)), FP16)
    acc = beats[:, 0]
    for j in range(1, 16):
        acc = fadd(acc, beats[:, j], FP32)
    assert not np.array_equal(acc, fl.gemv(w, x))


def test_w4a16_groups_do_not_depend_on_fmacs():
    # D of each group as F-lane beats (F <= group size, so a beat never crosses a group).
    rng = np.random.default_rng(11)
    w = random_weights(rng, "w4a16", 3, 64)
    x = random_x(rng, "w4a16", 64)
    qf = int_to_float(w.codes, 5, FP16)
    d_tree = pairwise_reduce(fmul(qf, x, FP16, FP16, FP32).reshape(3, 4, 16),
                             lambda a, b: fadd(a, b, FP32))
    for f in (1, 2, 4, 8, 16):
        beats = fdot(qf.reshape(3, 4, 16 // f, f),
                     np.broadcast_to(x.reshape(4, 16 // f, f), (3, 4, 16 // f, f)), FP16)
        d = np.array([[tree(list(b), add32) for b in row] for row in beats])
        assert np.array_equal(d, d_tree)
        assert np.array_equal(fl.gemv(w, x, fmacs=f), fl.gemv(w, x))


def test_w4a16_dequantize_first_would_differ():
    # The folded order is observable: dequantizing each weight first (s * q + o in fp32, then
    # fp32 x fp16 products, one tree) gives other bits on random data.
    rng = np.random.default_rng(5)
    w = random_weights(rng, "w4a16", 16, 128)
    x = random_x(rng, "w4a16", 128)
    s = np.repeat(w.scales, 16, axis=1)
    o = fconvert(np.repeat(w.offsets, 16, axis=1), FP16, FP32)
    deq = fadd(fmul(s, int_to_float(w.codes, 5, FP16), FP16, FP16, FP32), o, FP32)
    other = pairwise_reduce(fmul(deq, x, FP32, FP16, FP32), lambda a, b: fadd(a, b, FP32))
    assert not np.array_equal(other, fl.gemv(w, x))


# --- GEMV: references and bounds ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fp16", "bf16", "w4a16"])
@pytest.mark.parametrize("rows,cols", [(8, 16), (4, 48), (6, 1024)])
def test_gemv_within_bound(mode, rows, cols):
    for seed in range(2):
        rng = np.random.default_rng(seed)
        w = random_weights(rng, mode, rows, cols)
        x = random_x(rng, mode, cols)
        err = np.abs(as_f64(fl.gemv(w, x)) - fl.gemv_reference(w, x))
        bound = fl.gemv_bound(w, x)
        assert (err <= bound).all()
        assert (bound > 0).all()


def test_gemv_bound_is_tight_enough_to_catch_fp16_accumulation():
    # Rounding the products and sums to fp16 (a plausible bug) leaves the bound far behind.
    rng = np.random.default_rng(2)
    magnitudes = rng.uniform(0.5, 2.0, (8, 256)) * rng.choice([-1, 1], (8, 256))
    w = fl.Weights("fp16", from_float(magnitudes, FP16))      # no subnormal: S = 0
    x = from_float(rng.uniform(0.5, 2.0, 256), FP16)
    wrong = pairwise_reduce(fmul(w.codes, x, FP16, FP16, FP16), lambda a, b: fadd(a, b, FP16))
    err = np.abs(_values(wrong, FP16) - fl.gemv_reference(w, x))
    assert (err > fl.gemv_bound(w, x)).any()
    # And the bound is about ceil(log2 cols) * 2**-24 of sum |w x| when nothing is subnormal.
    mass = np.abs(_values(w.codes, FP16)) @ np.abs(_values(x, FP16))
    assert np.allclose(fl.gemv_bound(w, x) / mass, 8 * 2.0 ** -24, rtol=1e-5)


def test_subnormal_input_is_flushed_and_covered():
    # fp16 0x0010 is 2**-20, a subnormal: the units read it as 0, the reference does not.
    w = fl.Weights("fp16", codes([[1.0, 1.0]]))
    x = np.array([0x3C00, 0x0010], np.uint16)
    assert fl.gemv(w, x).tolist() == [ONE]
    assert fl.gemv_reference(w, x).tolist() == [1 + 2.0 ** -20]
    bound = float(fl.gemv_bound(w, x)[0])
    assert 2.0 ** -20 <= bound < 2.0 ** -19


def test_w8a8_is_exact():
    rng = np.random.default_rng(4)
    for rows, cols in ((4, 1), (5, 77), (3, 4096)):
        w = random_weights(rng, "w8a8", rows, cols)
        x = random_x(rng, "w8a8", cols)
        ref = [sum(int(a) * int(b) for a, b in zip(row, x)) for row in w.codes]
        assert fl.gemv(w, x).tolist() == ref == fl.gemv_reference(w, x).tolist()
        assert (fl.gemv_bound(w, x) == 0).all()


# --- page pipeline and cycle counts ---------------------------------------------------------------


def test_page_pipeline_by_hand():
    # Read-bound: pages enter the cache register every tR = 10 cycles, the last ends 4 later.
    t = fl.page_pipeline(10, [4, 4, 4], [3, 2, 4], pe_latency=5)
    assert t.stream_start.tolist() == [10, 20, 30] and t.read_start.tolist() == [0, 10, 20]
    assert t.stream_end.tolist() == [14, 24, 34] and (t.period, t.total) == (10, 39)
    # Stream-bound: P = 20 > tR.
    t = fl.page_pipeline(10, [20, 20, 20], [0, 0, 0])
    assert t.stream_start.tolist() == [10, 30, 50] and t.read_start.tolist() == [0, 10, 30]
    assert (t.period, t.total) == (20, 70)
    # Mixed: page 1 is slow, page 2 waits for it (its read finished at 30, the PE at 40).
    t = fl.page_pipeline(10, [4, 1, 4], [1, 20, 4])
    assert t.stage.tolist() == [4, 20, 4]
    assert t.stream_start.tolist() == [10, 20, 40] and t.total == 44


def test_beats_per_page_by_hand():
    # fp16, 4 rows of 3 columns, F = 2: beats end at elements 1, 2 of each row, i.e. global
    # elements 1 2 4 5 7 8 10 11; a 16-byte page holds 8 elements: 5 beats end in page 0, 3 in 1.
    assert fl.beats_per_page("fp16", 4, 3, fmacs=2, page_bytes=16).tolist() == [5, 3]
    # F dividing everything: elements per page / F.
    assert fl.beats_per_page("fp16", 4, 8, fmacs=4, page_bytes=16).tolist() == [2, 2, 2, 2]
    # w4a16, one 12-byte record per group of 16 (4 header bytes), F = 8: beats end at record
    # bytes 7 and 11; records at 0, 12, 24: ends at 7 11 19 23 31 35 -> 16-byte pages 2, 3, 1.
    assert fl.beats_per_page("w4a16", 1, 48, fmacs=8, group_size=16,
                             page_bytes=16).tolist() == [2, 3, 1]


@pytest.mark.parametrize("mode", ["fp16", "bf16", "w8a8", "w4a16"])
def test_beats_per_page_against_enumeration(mode):
    rng = np.random.default_rng(len(mode))
    for _ in range(6):
        f = int(rng.choice([1, 2, 4, 8, 16]))
        page = int(rng.choice([16, 32, 64]))
        rows = int(rng.integers(1, 6))
        cols = 16 * int(rng.integers(1, 4)) if mode == "w4a16" else int(rng.integers(1, 40))
        size = 2 if mode in ("fp16", "bf16") else 1
        ends = []
        for r in range(rows):                          # enumerate every beat's last byte
            for b in range(0, cols, f):
                last = min(b + f, cols) - 1
                if mode == "w4a16":
                    group, k = divmod(last, 16)
                    ends.append((r * cols // 16 + group) * 12 + 4 + k // 2)
                else:
                    ends.append((r * cols + last) * size + size - 1)
        n = fl.page_count(mode, rows, cols, group_size=16, page_bytes=page)
        want = np.bincount(np.array(ends) // page, minlength=n)
        got = fl.beats_per_page(mode, rows, cols, fmacs=f, group_size=16, page_bytes=page)
        assert got.tolist() == want.tolist(), (rows, cols, f, page)


def test_gemv_timing_of_a_7b_layer():
    # fp16 4096 x 4096, F = 2: 8192 pages of 2048 elements, 1024 beats, 1024 transfer cycles:
    # read-bound, 1600 + 8191 * 1600 + 1024.
    t = fl.gemv_timing(fl.FlashGeometry(), "fp16", 4096, 4096)
    assert (t.pages, t.period, set(t.compute.tolist()), set(t.transfer.tolist())) == \
        (8192, 1600, {1024}, {1024})
    assert t.total == 8192 * 1600 + 1024
    # F = 1: 2048 beats per page > tR: compute-bound, 1600 + 8192 * 2048.
    t = fl.gemv_timing(fl.FlashGeometry(fmacs=1), "fp16", 4096, 4096, pe_latency=77)
    assert (t.period, t.total) == (2048, 1600 + 8192 * 2048 + 77)
    # w8a8, F = 2: 4096 elements per page, 2048 beats: compute-bound too.
    t = fl.gemv_timing(fl.FlashGeometry(), "w8a8", 4096, 4096)
    assert (t.pages, t.period, t.total) == (4096, 2048, 1600 + 4096 * 2048)
    # w4a16 on the paper's plane (F = 16): every beat counted once, read-bound.
    t = fl.gemv_timing(fl.FlashGeometry.paper(), "w4a16", 4096, 4096, group_size=128)
    assert (t.pages, int(t.compute.sum()), t.period) == (2176, 4096 * 4096 // 16, 1600)
    assert t.total == 1600 + 2175 * 1600 + int(max(t.transfer[-1], t.compute[-1]))


def test_gemv_timing_partial_last_page():
    # 3 x 5 fp16 = 30 bytes on 16-byte pages: 16 + 14 used bytes.
    g = fl.FlashGeometry(page_bytes=16, transfer_bytes=4, tR_us=0.01, clk_mhz=400, fmacs=1)
    t = fl.gemv_timing(g, "fp16", 3, 5)
    assert t.transfer.tolist() == [4, 4]             # ceil(14 / 4) = 4
    assert t.compute.tolist() == [8, 7]
    assert (t.tR, t.total) == (4, 4 + 8 + 7)          # compute-bound: 4 + max(4, 8) + 7
    g2 = fl.FlashGeometry(page_bytes=16, transfer_bytes=1, tR_us=0.01, clk_mhz=400, fmacs=16)
    t2 = fl.gemv_timing(g2, "fp16", 3, 5)
    assert t2.transfer.tolist() == [16, 14] and t2.compute.tolist() == [1, 2]
    assert t2.total == 4 + 16 + 14


# --- KV mapping -----------------------------------------------------------------------------------


SMALL = fl.KVLayout(layers=2, kv_heads=2, head_dim=4, page_bytes=32)   # 8-byte entries, T_p = 4


def test_kv_address_by_hand():
    naive = SMALL.with_mapping("naive")
    assert (SMALL.entry_bytes, SMALL.tokens_per_page, SMALL.entries_per_token) == (8, 4, 8)
    # (layer 1, head 0, token 5, V): c = (2 + 1) * 2 + 0 = 6.
    # page-level: page = (5 // 4) * 8 + 6 = 14, slot 1 -> offset 8.
    # naive: e = 5 * 8 + 6 = 46, page 11, slot 2 -> offset 16.
    assert [int(v) for v in fl.kv_address(SMALL, 1, 0, 5, fl.V)] == [14, 8]
    assert [int(v) for v in fl.kv_address(naive, 1, 0, 5, "V")] == [11, 16]
    assert [int(v) for v in fl.kv_address(SMALL, 0, 1, 0, "K")] == [1, 0]
    assert [int(v) for v in fl.kv_address(naive, 0, 1, 0, fl.K)] == [0, 8]
    page, offset = fl.kv_address(SMALL, 0, 0, np.arange(6), 0)
    assert page.tolist() == [0, 0, 0, 0, 8, 8] and offset.tolist() == [0, 8, 16, 24, 0, 8]


@pytest.mark.parametrize("mapping", fl.MAPPINGS)
def test_kv_table_is_a_bijection_within_pages(mapping):
    layout = fl.KVLayout(layers=3, kv_heads=2, head_dim=3, page_bytes=32, mapping=mapping)
    t = 11
    table = fl.kv_table(layout, t)
    assert len(table) == t * layout.entries_per_token
    assert table["token"].tolist() == sorted(table["token"].tolist())     # generation order
    slots = set(zip(table["page"].tolist(), table["offset"].tolist()))
    assert len(slots) == len(table)
    assert (table["offset"] % layout.entry_bytes == 0).all()
    assert (table["offset"] + layout.entry_bytes <= layout.tokens_per_page * 6).all()
    assert table["page"].max() == fl.kv_page_count(layout, t) - 1
    # Pages are programmed in ascending order as they fill: the first entry of each page comes
    # before the first entry of the next one in generation order.
    firsts = [int(np.argmax(table["page"] == p)) for p in range(fl.kv_page_count(layout, t))]
    assert firsts == sorted(firsts)


def test_paper_tokens_per_page_and_reads():
    mha = fl.KVLayout(layers=32, kv_heads=32, head_dim=128)        # LLaMA2-7B, fp16
    assert (mha.entry_bytes, mha.tokens_per_page) == (256, 16)     # the paper's 256 B
    naive = mha.with_mapping("naive")
    assert [fl.kv_pages_read(mha, t) for t in (1024, 10240, 10000)] == [64, 640, 625]
    assert [fl.kv_pages_read(naive, t) for t in (1024, 10000)] == [1024, 10000]
    gqa = fl.KVLayout(layers=32, kv_heads=8, head_dim=128)         # LLaMA3-8B: per head group
    assert fl.kv_pages_read(gqa, 1024) == 64
    assert fl.kv_pages_read(gqa.with_mapping("naive"), 1024, layer=31, head=7, kind="V") == 1024
    int8 = fl.KVLayout(layers=32, kv_heads=32, head_dim=128, kv_format="int8")
    assert (int8.tokens_per_page, fl.kv_pages_read(int8, 1024)) == (32, 32)
    assert mha.buffer_bytes == 2 * 32 * 32 * 4096 and naive.buffer_bytes == 4096


def test_naive_reads_when_a_page_holds_several_tokens_of_a_head():
    # One layer, one head, d = 4 fp16 in 64-byte pages: T_p = 8, S = 2 < T_p.
    layout = fl.KVLayout(layers=1, kv_heads=1, head_dim=4, page_bytes=64, mapping="naive")
    # K entries e = 2t: pages t // 4 -> 0, 1, 2 for t < 10; V entries 2t + 1: pages 0..2.
    assert fl.kv_page_sequence(layout, 10).tolist() == [0, 1, 2]
    assert fl.kv_page_sequence(layout, 10, kind="V").tolist() == [0, 1, 2]
    assert fl.kv_pages_read(layout, 4) == 1 and fl.kv_pages_read(layout, 5) == 2
    assert fl.kv_pages_read(layout.with_mapping("page"), 10) == 2


@pytest.mark.parametrize("layers,heads,d,page", [(2, 2, 4, 32), (1, 1, 4, 64), (1, 2, 3, 64),
                                                 (3, 1, 2, 16)])
def test_pages_read_formula_matches_the_sequence(layers, heads, d, page):
    for mapping in fl.MAPPINGS:
        layout = fl.KVLayout(layers, heads, d, page_bytes=page, mapping=mapping)
        for t in range(1, 40):
            for layer in range(layers):
                for head in range(heads):
                    for kind in (fl.K, fl.V):
                        seq = fl.kv_page_sequence(layout, t, layer=layer, head=head, kind=kind)
                        assert fl.kv_pages_read(layout, t, layer=layer, head=head,
                                                kind=kind) == len(seq)
        # Page-level never reads more than naive.
        if mapping == "naive":
            page_level = layout.with_mapping("page")
            assert all(fl.kv_pages_read(page_level, t) <= fl.kv_pages_read(layout, t)
                       for t in range(1, 40))


def _cache(t, layout=SMALL, seed=0):
    rng = np.random.default_rng(seed)
    shape = (t, layout.layers, layout.kv_heads, layout.head_dim)
    return rng.integers(0, 1 << 16, shape), rng.integers(0, 1 << 16, shape)


def test_kv_write_by_hand():
    # SMALL: T_p = 4, S = 8. Five tokens page-level: group 0 fills pages 0..7 with 4 tokens
    # each; the flush programs pages 8..15 with token 4 alone.
    keys, values = _cache(5)
    w = fl.kv_write(SMALL, keys, values, pages=100, slots=8)
    assert w.pages.tolist() == list(range(16)) and (w.entries, w.error) == (40, None)
    assert w.table["entries"].tolist() == [4] * 8 + [1] * 8
    # Page 14 is c = 6: layer 1, V, head 0, tokens from 4.
    rec = w.table[14]
    assert [int(rec[n]) for n in ("page", "layer", "kind", "head", "token")] == [14, 1, 1, 0, 4]
    assert np.array_equal(w.images, fl.kv_pages(SMALL, keys, values))
    # 7 buffer pages cannot hold 8 streams: nothing stored.
    w = fl.kv_write(SMALL, keys, values, pages=100, slots=7)
    assert (len(w.pages), w.entries, w.error) == (0, 0, "buffer")
    # 12 pages: token 4 would need pages 8..15, so it is dropped; tokens 0..3 are stored.
    w = fl.kv_write(SMALL, keys, values, pages=12, slots=8)
    assert (w.pages.tolist(), w.entries, w.error) == (list(range(8)), 32, "pages")
    # Naive, 9 pages: token t ends on page (8 t + 7) // 4 = 2 t + 1, so tokens 0..3 fit.
    naive = SMALL.with_mapping("naive")
    w = fl.kv_write(naive, keys, values, pages=9, slots=1)
    assert (w.pages.tolist(), w.entries, w.error) == (list(range(8)), 32, "pages")
    assert w.table["entries"].tolist() == [4] * 8
    # Page 3 of naive starts at entry 12: token 1, c = 4 (layer 1, K, head 0).
    assert [int(w.table[3][n]) for n in ("token", "layer", "kind", "head")] == [1, 1, 0, 0]
    # A sequence ending inside token 2 (three of its entries): pages 0..7 of group 0, the
    # first three streams with three tokens, the others with two.
    w = fl.kv_write(SMALL, keys, values, pages=100, slots=8, entries=19)
    assert w.pages.tolist() == list(range(8)) and w.entries == 19
    assert w.table["entries"].tolist() == [3] * 3 + [2] * 5
    # Ending inside token 4 (two entries): pages 8 and 9 hold one each.
    w = fl.kv_write(SMALL, keys, values, pages=100, slots=8, entries=34)
    assert w.pages.tolist() == list(range(10)) and w.table["entries"].tolist()[8:] == [1, 1]


@pytest.mark.parametrize("mapping", fl.MAPPINGS)
@pytest.mark.parametrize("t", [1, 3, 4, 9])
def test_kv_write_stores_what_the_mapping_says(mapping, t):
    """Every stored entry reads back through kv_read; pages rise, each programmed once; the
    records count every entry once; with room enough nothing is dropped."""
    layout = fl.KVLayout(layers=2, kv_heads=3, head_dim=3, page_bytes=32, mapping=mapping)
    keys, values = _cache(t, layout, seed=t)
    w = fl.kv_write(layout, keys, values, pages=1000, slots=12)
    assert (w.entries, w.error) == (t * layout.entries_per_token, None)
    assert (np.diff(w.pages) > 0).all() and w.table["entries"].sum() == w.entries
    pages = np.full((int(w.pages[-1]) + 1, 32), fl.ERASED, np.uint8)
    pages[w.pages] = w.images
    assert np.array_equal(pages, fl.kv_pages(layout, keys, values))
    for layer in range(2):
        for head in range(3):
            assert np.array_equal(fl.kv_read(layout, pages, layer, head, fl.V, t),
                                  values[:, layer, head])


@pytest.mark.parametrize("fmt", fl.KV_FORMATS)
@pytest.mark.parametrize("mapping", fl.MAPPINGS)
def test_kv_pages_round_trip(fmt, mapping):
    layout = fl.KVLayout(layers=2, kv_heads=3, head_dim=3, kv_format=fmt, page_bytes=32,
                         mapping=mapping)
    rng = np.random.default_rng(1)
    t = 7
    if fmt == "int8":
        keys, values = rng.integers(-128, 128, (2, t, 2, 3, 3))
    else:
        keys, values = rng.integers(0, 1 << 16, (2, t, 2, 3, 3))
    pages = fl.kv_pages(layout, keys, values)
    assert pages.shape == (fl.kv_page_count(layout, t), 32)
    for layer in range(2):
        for head in range(3):
            assert np.array_equal(fl.kv_read(layout, pages, layer, head, "K", t),
                                  keys[:, layer, head])
            assert np.array_equal(fl.kv_read(layout, pages, layer, head, "V", t),
                                  values[:, layer, head])
    used = t * layout.entries_per_token * layout.entry_bytes
    stored = np.zeros(pages.size, bool)
    table = fl.kv_table(layout, t)
    for start in table["page"] * 32 + table["offset"]:
        stored[start:start + layout.entry_bytes] = True
    assert stored.sum() == used and (pages.reshape(-1)[~stored] == fl.ERASED).all()


# --- Logit and Attend -----------------------------------------------------------------------------


def test_logit_by_hand():
    q = codes([[1, 2], [0.5, 0]])
    keys = codes([[1, 1], [2, -1], [0, 4]])
    assert fl.logit(q, keys).tolist() == [[f32(3), f32(0), f32(8)], [f32(0.5), f32(1), f32(0)]]
    assert fl.logit(np.array([[2, -3]]), np.array([[127, -128], [1, 1]]), "int8").tolist() == \
        [[254 + 384, -1]]


def test_logit_is_the_gemv_order():
    rng = np.random.default_rng(8)
    for fmt in ("fp16", "bf16"):
        q = random_x(rng, fmt, 4 * 48).reshape(4, 48)
        keys = random_weights(rng, fmt, 9, 48).codes
        got = fl.logit(q, keys, fmt)
        for h in range(4):
            assert np.array_equal(got[h], fl.gemv(fl.Weights(fmt, keys), q[h]))


def test_logit_matches_flowkv_scores():
    # The FlowKV golden model sums q . k in the same pairwise tree (bf16 only).
    from golden.flowkv import dot_scores
    rng = np.random.default_rng(9)
    q = random_x(rng, "bf16", 2 * 24).reshape(2, 24)
    keys = random_weights(rng, "bf16", 13, 24).codes
    assert np.array_equal(fl.logit(q, keys, "bf16"), dot_scores(q, keys))


def test_attend_by_hand():
    y = fl.attend(codes([[0.5, 0.25]]), codes([[2, 4], [4, 8]]))
    assert y.tolist() == [[f32(2), f32(4)]]
    assert fl.attend(np.array([[1, -2]]), np.array([[3, 4], [5, -128]]), "int8").tolist() == \
        [[3 - 10, 4 + 256]]


def test_attend_is_sequential_in_token_order():
    # Products 1, t, t, t (t = 2**-24): in token order 1 + t rounds to 1 three times -> 1.0;
    # a tree would give (1 + t) + (t + t) = 1 + 2**-23; reversed, ((t + t) + t) + 1 = 1 + 1.5 ulp
    # rounds to even, 1 + 2**-22.
    p = codes([[1, T24, T24, T24]])
    v = codes([[1], [T24], [T24], [T24]])
    assert fl.attend(p, v).tolist() == [[ONE]]
    assert fl.attend(p[:, ::-1], v[::-1]).tolist() == [[0x3F800002]]


def test_attend_accumulator_starts_at_negative_zero():
    # Every product -0: the result is -0 (a +0 start would give +0).
    assert fl.attend(codes([[-0.0, -0.0]]), codes([[1], [2]])).tolist() == [[0x80000000]]
    assert fl.attend(codes([[-0.0, 0.0]]), codes([[1], [2]])).tolist() == [[0]]


def attend_scalar(p, values):
    heads, t = p.shape
    out = []
    for h in range(heads):
        row = []
        for e in range(values.shape[1]):
            acc = 0x80000000
            for j in range(t):
                acc = add32(int(fmul(p[h, j], values[j, e], FP16, FP16, FP32)), acc)
            row.append(acc)
        out.append(row)
    return out


def test_attend_matches_scalar_order():
    rng = np.random.default_rng(12)
    p = from_float(rng.random((3, 20)), FP16)
    values = from_float(rng.standard_normal((20, 5)) * np.exp2(rng.integers(-9, 9, (20, 5))),
                        FP16)
    assert fl.attend(p, values).tolist() == attend_scalar(p, values)


def test_gqa_heads_are_independent():
    rng = np.random.default_rng(13)
    q = random_x(rng, "fp16", 4 * 16).reshape(4, 16)
    keys = random_weights(rng, "fp16", 30, 16).codes
    p = from_float(rng.random((4, 30)), FP16)
    scores, out = fl.logit(q, keys), fl.attend(p, keys)
    for h in range(4):
        assert np.array_equal(scores[h], fl.logit(q[h:h + 1], keys)[0])
        assert np.array_equal(out[h], fl.attend(p[h:h + 1], keys)[0])


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "int8"])
@pytest.mark.parametrize("group", [1, 4])
def test_attention_on_pages_under_both_mappings(fmt, group):
    rng = np.random.default_rng(group)
    t, d = 23, 8
    page = fl.KVLayout(layers=2, kv_heads=2, head_dim=d, kv_format=fmt, page_bytes=64)
    if fmt == "int8":
        keys, values = rng.integers(-128, 128, (2, t, 2, 2, d))
        q, p = rng.integers(-128, 128, (group, d)), rng.integers(-128, 128, (group, t))
    else:
        f = FP16 if fmt == "fp16" else BF16
        keys, values = from_float(rng.standard_normal((2, t, 2, 2, d)), f)
        q, p = from_float(rng.standard_normal((group, d)), f), from_float(rng.random((group, t)), f)
    results = []
    for layout in (page, page.with_mapping("naive")):
        pages = fl.kv_pages(layout, keys, values)
        s = fl.logit_pages(layout, pages, q, 1, 0, t)
        y = fl.attend_pages(layout, pages, p, 1, 0, t)
        assert np.array_equal(s, fl.logit(q, keys[:, 1, 0], fmt))
        assert np.array_equal(y, fl.attend(p, values[:, 1, 0], fmt))
        results.append((s, y))
    assert all(np.array_equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("heads,t,d", [(1, 1, 4), (4, 50, 64), (2, 300, 128)])
def test_logit_and_attend_within_bound(fmt, heads, t, d):
    f = FP16 if fmt == "fp16" else BF16
    rng = np.random.default_rng(t)
    q = from_float(rng.standard_normal((heads, d)), f)
    keys = from_float(rng.standard_normal((t, d)), f)
    s = rng.standard_normal((heads, t))
    p = from_float(np.exp(s) / np.exp(s).sum(1, keepdims=True), f)
    err = np.abs(as_f64(fl.logit(q, keys, fmt)) - fl.logit_reference(q, keys, fmt))
    assert (err <= fl.logit_bound(q, keys, fmt)).all()
    err = np.abs(as_f64(fl.attend(p, keys, fmt)) - fl.attend_reference(p, keys, fmt))
    assert (err <= fl.attend_bound(p, keys, fmt)).all()


def test_int8_attention_is_exact():
    rng = np.random.default_rng(14)
    q, keys = rng.integers(-128, 128, (3, 16)), rng.integers(-128, 128, (40, 16))
    p = rng.integers(-128, 128, (3, 40))
    assert fl.logit(q, keys, "int8").tolist() == fl.logit_reference(q, keys, "int8").tolist()
    assert fl.attend(p, keys, "int8").tolist() == fl.attend_reference(p, keys, "int8").tolist()
    assert (fl.attend_bound(p, keys, "int8") == 0).all()


def test_attention_timing_and_the_papers_sizing():
    gqa = fl.KVLayout(layers=32, kv_heads=8, head_dim=128)
    # 16 FMACs, 8 query heads per KV head: 8 * 128 / 16 = 64 cycles per token, 16 tokens per
    # page -> 1024 cycles, hidden under tR = 1600: 64 pages at 1024 tokens.
    t = fl.attention_timing(fl.FlashGeometry.paper(), gqa, 1024, group=8)
    assert (t.pages, set(t.compute.tolist()), t.period) == (64, {1024}, 1600)
    assert t.total == 64 * 1600 + 1024
    # The same with 2 FMACs: 512 cycles per token, compute-bound.
    t = fl.attention_timing(fl.FlashGeometry(), gqa, 1024, group=8)
    assert (t.period, t.total) == (8192, 1600 + 64 * 8192)
    # MHA with 2 FMACs: 64 cycles per token, the same 1024 per page as GQA with 16.
    mha = fl.KVLayout(layers=32, kv_heads=32, head_dim=128)
    assert set(fl.attention_timing(fl.FlashGeometry(), mha, 96).compute.tolist()) == {1024}
    # Float Attend with 16 FMACs on MHA: 8 cycles per token is below the 11-cycle loop.
    t = fl.attention_timing(fl.FlashGeometry.paper(), mha, 32, op="attend")
    assert t.compute.tolist() == [16 * 11, 16 * 11]
    # Naive mapping: one entry per page, 100 reads of tR.
    naive = fl.attention_timing(fl.FlashGeometry(), mha.with_mapping("naive"), 100)
    assert (naive.pages, naive.total) == (100, 100 * 1600 + 64)


def test_attention_beats_hold_one_head():
    # A beat is F elements of one head's vector (a GEMV row): d = 8 on 16 lanes is one padded
    # beat per head, so 2 query heads take 2 cycles per token (not ceil(2 * 8 / 16) = 1), and
    # d = 5 on 2 lanes takes 3 beats per head (the last padded), 9 for 3 heads (not 8).
    small = fl.KVLayout(layers=1, kv_heads=1, head_dim=8, page_bytes=128)
    geo = fl.FlashGeometry(page_bytes=128, transfer_bytes=16, fmacs=16)
    assert fl.attention_timing(geo, small, 8, group=2).compute.tolist() == [16]
    odd = fl.KVLayout(layers=1, kv_heads=1, head_dim=5, page_bytes=128)
    geo = fl.FlashGeometry(page_bytes=128, fmacs=2)
    assert fl.attention_timing(geo, odd, 4, group=3).compute.tolist() == [4 * 9]


# --- read disturb ---------------------------------------------------------------------------------


def test_block_reads_by_hand():
    g = fl.FlashGeometry(pages_per_block=4, blocks=3)
    assert fl.block_reads(g, [0, 1, 5, 5, 9]).tolist() == [2, 2, 1]
    g4 = fl.FlashGeometry(pages_per_block=4, blocks=4)
    assert fl.block_reads(g4, np.arange(6, 13)).tolist() == [0, 2, 4, 1]     # a GEMV's pages


def test_block_reads_of_attention():
    # Head (layer 1, head 1), K: c = (2 + 0) * 2 + 1 = 5, T = 10.
    g = fl.FlashGeometry(pages_per_block=8, blocks=3)
    page_seq = fl.kv_page_sequence(SMALL, 10, layer=1, head=1)
    naive_seq = fl.kv_page_sequence(SMALL.with_mapping("naive"), 10, layer=1, head=1)
    assert page_seq.tolist() == [5, 13, 21]                  # (t // 4) * 8 + 5
    assert naive_seq.tolist() == list(range(1, 20, 2))       # (8t + 5) // 4 = 2t + 1
    assert fl.block_reads(g, page_seq).tolist() == [1, 1, 1]
    assert fl.block_reads(g, naive_seq).tolist() == [4, 4, 2]


# --- errors ---------------------------------------------------------------------------------------


def _w(**kw):
    return fl.FlashGeometry(**kw)


ERRORS = [
    (lambda: _w(fmacs=12), ValueError,
     "FMAC count must be a power of two between 1 and 16, not 12"),
    (lambda: _w(fmacs=2.0), TypeError, "FMAC count must be an integer power of two between 1 "
                                       "and 16, not 2.0"),
    (lambda: _w(page_bytes=1000), ValueError, "Page size in bytes must be a power of two between "
                                              "16 and 65536, not 1000"),
    (lambda: _w(transfer_bytes=8192), ValueError, "Transfer width in bytes per cycle must be a "
                                                  "power of two between 1 and 4096, not 8192"),
    (lambda: _w(tR_us=0), ValueError, "Read time tR_us must be a positive number of "
                                      "microseconds, not 0"),
    (lambda: _w(tP_us=-1.5), ValueError, "Program time tP_us must be a positive number of "
                                         "microseconds, not -1.5"),
    (lambda: _w(tR_us="4"), TypeError, "Read time tR_us must be a positive number of "
                                       "microseconds, not '4'"),
    (lambda: _w(clk_mhz=0), ValueError, "Clock frequency clk_mhz must be a positive number of "
                                        "MHz, not 0"),
    (lambda: _w(pages_per_block=0), ValueError, "Pages per block must be between 1 and 65536, "
                                                "not 0"),
    (lambda: _w(blocks=0), ValueError, "Block count must be between 1 and 1048576, not 0"),
    (lambda: fl.Weights("int4", np.zeros((1, 1), int)), ValueError,
     "Precision mode must be fp16, bf16, w8a8 or w4a16, not 'int4'"),
    (lambda: fl.Weights("fp16", np.zeros((2, 2))), TypeError,
     r"Weights must be fp16 bit patterns \(an integer array\), not float64"),
    (lambda: fl.Weights("fp16", np.zeros(4, int)), ValueError,
     r"Weights must be a non-empty \(rows, cols\) array, not shape \(4,\)"),
    (lambda: fl.Weights("bf16", np.array([[70000]])), ValueError,
     "Weights must be 16-bit codes between 0 and 65535, not 70000"),
    (lambda: fl.Weights("w8a8", np.array([[200]])), ValueError,
     "Weights must be int8 values between -128 and 127, not 200"),
    (lambda: fl.Weights("w4a16", np.array([[16] * 16]), np.zeros((1, 1), int),
                        np.zeros((1, 1), int), 16), ValueError,
     "Weights must be int4 codes between 0 and 15, not 16"),
    (lambda: fl.Weights("w8a8", np.zeros((1, fl.MAX_COLS + 1), int)), ValueError,
     "Column count must be between 1 and 65536, not 65537"),
    (lambda: fl.Weights("w4a16", np.zeros((1, 48), int), np.zeros((1, 1), int),
                        np.zeros((1, 1), int), 48), ValueError,
     "Group size must be a power of two between 16 and 1024, not 48"),
    (lambda: fl.Weights("w4a16", np.zeros((1, 40), int), np.zeros((1, 2), int),
                        np.zeros((1, 2), int), 16), ValueError,
     "Column count must be a multiple of the group size 16, not 40"),
    (lambda: fl.Weights("w4a16", np.zeros((2, 32), int), np.zeros((2, 3), int),
                        np.zeros((2, 2), int), 16), ValueError,
     r"Scales must have shape \(2, 2\) \(rows, cols / group size\), not \(2, 3\)"),
    (lambda: fl.Weights("w4a16", np.zeros((2, 32), int), np.zeros((2, 2), int), None, 16),
     ValueError, r"Mode w4a16 needs offsets \(fp16 codes, shape \(2, 2\)\), not None"),
    (lambda: fl.Weights("fp16", np.zeros((1, 2), int), np.zeros((1, 1), int)), ValueError,
     "Scales and offsets belong to mode w4a16 only, not fp16"),
    (lambda: fl.gemv(fl.Weights("fp16", np.zeros((1, 4), int)), np.zeros(3, int)), ValueError,
     r"Input vector must have 4 elements \(the column count\), not 3"),
    (lambda: fl.gemv(fl.Weights("w8a8", np.zeros((1, 2), int)), np.array([1, 300])), ValueError,
     "Input vector must be int8 values between -128 and 127, not 300"),
    (lambda: fl.gemv(fl.Weights("fp16", np.zeros((1, 4), int)), np.zeros(4, int), fmacs=12),
     ValueError, "FMAC count must be a power of two between 1 and 16, not 12"),
    (lambda: fl.weights_from_pages(np.zeros((1, 16), np.uint8), "fp16", 3, 5), ValueError,
     "Page count must be 2 for a 3 x 5 fp16 matrix, not 1"),
    (lambda: fl.weights_from_pages(np.zeros((2, 16)), "fp16", 3, 5), ValueError,
     r"Pages must be a \(pages, page bytes\) uint8 array, not float64 of shape \(2, 16\)"),
    (lambda: fl.page_pipeline(10, [1, 2], [1]), ValueError,
     "Transfer and compute cycles must be two non-empty arrays of one length, not 2 and 1"),
    (lambda: fl.KVLayout(2, 2, 4, kv_format="fp8"), ValueError,
     "KV format must be fp16, bf16 or int8, not 'fp8'"),
    (lambda: fl.KVLayout(2, 2, 4, mapping="random"), ValueError,
     "KV mapping must be page or naive, not 'random'"),
    (lambda: fl.KVLayout(1, 1, 4096), ValueError,
     "A KV entry \\(head dimension x element bytes\\) must fit in a page of 4096 bytes, "
     "not 8192"),
    (lambda: fl.kv_address(SMALL, 2, 0, 0, 0), ValueError, "Layer must be between 0 and 1, not 2"),
    (lambda: fl.kv_address(SMALL, 0, 0, 0, "Q"), ValueError, "Kind must be K or V \\(0 or 1\\), "
                                                            "not 'Q'"),
    (lambda: fl.kv_pages_read(SMALL, 0), ValueError,
     "Sequence length must be between 1 and 16777216, not 0"),
    (lambda: fl.logit(np.zeros((1, 4), int), np.zeros((3, 8), int)), ValueError,
     r"Key head dimension must be 4 \(the query's\), not 8"),
    (lambda: fl.attend(np.zeros((1, 3), int), np.zeros((4, 8), int)), ValueError,
     r"Values must have 3 tokens \(the attention weights'\), not 4"),
    (lambda: fl.logit_bound(np.zeros((1, 4), int), np.zeros((3, 8), int)), ValueError,
     r"Key head dimension must be 4 \(the query's\), not 8"),
    (lambda: fl.attend_reference(np.zeros((1, 3), int), np.zeros((4, 8), int)), ValueError,
     r"Values must have 3 tokens \(the attention weights'\), not 4"),
    (lambda: fl.block_reads(_w(pages_per_block=4, blocks=2), [8]), ValueError,
     "Page must be between 0 and 7, not 8"),
    (lambda: fl.attention_timing(_w(), SMALL, 4), ValueError,
     "KV page size must be the plane's 4096 bytes, not 32"),
]


@pytest.mark.parametrize("call,error,message", ERRORS)
def test_errors(call, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        call()


def test_numpy_integers_are_accepted():
    g = fl.FlashGeometry(fmacs=np.int64(4), page_bytes=np.int32(64), transfer_bytes=np.int8(8))
    assert (g.fmacs, g.page_bytes) == (4, 64)
    assert fl.kv_pages_read(SMALL, np.int64(9)) == 3
