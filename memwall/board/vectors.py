"""Stimulus and expected outputs for a block on the board harness, from its golden model.

One place for the vectors that ``memwall board run`` (on a board or with ``--sim``) and the
harness tests stream through :class:`~memwall.board.host.HarnessHost`: per registry block, a
generator that draws random inputs from a seed and computes every output item with the block's
golden model (``golden/``), never from the RTL. Items are the payload's bits as integers, as the
harness's ``WRITE`` and ``READ`` carry them (``layout.const(...).as_bits()``).

:func:`vectors` is the entry point; :data:`GENERATORS` says which blocks have a generator.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from golden import edram as edram_golden
from golden import flowkv as flowkv_golden
from golden.flowkv_dqp import dequantize, gemm
from golden.flowkv_dqp_streams import job_streams, random_q4nx
from golden import inflash as inflash_golden
from golden import rdxe as rdxe_golden
from golden import umdam as umdam_golden
from golden.arith import float as float_golden
from golden.arith import func as func_golden
from golden.arith import idot as idot_golden
from golden.arith import requant as requant_golden
from hdl.arith.format import BF16, FP32, float_format
from hdl.edram import Op, TensorClass
from hdl.flowkv import FlowKVConfig
from hdl.inflash.spec import Mode, Op as InflashOp
from hdl.rdxe import DESTS, GBUS_BYTES, OPS, DxtConfig
from hdl.rdxe.ctrl import Store
from hdl.rdxe.hosted import HostItem
from sim.rdxe.host import DxeModel, board_layer, ext_writes, row_values

from ..params import BlockParams, ParameterError
from ..registry import PayloadCodec

__all__ = ["Vectors", "GENERATORS", "vectors", "pack", "covered"]


@dataclass(frozen=True)
class Vectors:
    """Items per sink to play and the items each source must give, bit-exact, in order.

    ``setup``: items per sink for a run before ``stimulus``'s, which must give no output: loads
    the block keeps in its memories (the harness resets the block's registers before each run,
    not its memories), such as the weights a stream of chunks then meets.
    """

    stimulus: dict[str, list[int]]
    expected: dict[str, list[int]]
    setup: dict[str, list[int]] = field(default_factory=dict)


def pack(layout, values) -> int:
    """The payload bits of one item: ``values`` (a field -> value mapping) in ``layout``."""
    return layout.const(values).as_bits()


def _layouts(block, *names):
    return [getattr(block, name).payload.shape() for name in names]


def _np_rng(rng: random.Random) -> np.random.Generator:
    """A NumPy generator seeded from ``rng`` (the golden float helpers draw with NumPy)."""
    return np.random.default_rng(rng.randrange(1 << 32))


def _umdam(params, block, rng: random.Random, count: int) -> Vectors:
    """Random addresses and mapping selects (a select naming no mapping included): the mapped
    fields from :func:`golden.umdam.mapper_outputs`."""
    layout_i, layout_o = _layouts(block, "i", "o")
    addrs = [rng.randrange(1 << layout_i["addr"].width) for _ in range(count)]
    selects = [rng.randrange(1 << layout_i["mapping"].width) for _ in range(count)]
    out = umdam_golden.mapper_outputs(params.address_mappings, addrs, selects)
    stimulus = [pack(layout_i, {"addr": a, "mapping": s}) for a, s in zip(addrs, selects)]
    expected = [pack(layout_o, {name: int(out[name][k]) for name, _ in layout_o})
                for k in range(count)]
    return Vectors({"i": stimulus}, {"o": expected})


def _composer(params, block, rng: random.Random, count: int) -> Vectors:
    """Random coordinates and mapping selects (a select naming no mapping gives ``error`` and
    address 0, the contract): the address from :func:`golden.umdam.compose_addresses`."""
    layout_i, layout_o = _layouts(block, "i", "o")
    mappings, stimulus, expected = params.address_mappings, [], []
    for _ in range(count):
        item = {name: rng.getrandbits(field.width) for name, field in layout_i}
        select = item["mapping"]
        coords = {k: v for k, v in item.items() if k != "mapping"}
        addr = int(umdam_golden.compose_addresses(mappings[select], coords)) \
            if select < len(mappings) else 0
        stimulus.append(pack(layout_i, item))
        expected.append(pack(layout_o, {"addr": addr, "error": int(select >= len(mappings))}))
    return Vectors({"i": stimulus}, {"o": expected})


#: Largest rows and columns of a tile generator's drawn command: a few dozen addresses each.
_TILE_SIDE = 8
#: Orders of the tile generator, as its command field numbers them.
_ORDERS = ("npu", "pim")


def _tilegen(params, block, rng: random.Random, count: int) -> Vectors:
    """``count`` walk commands the generator accepts (an erroneous command's address fields
    carry no meaning, so none is drawn): every address beat from
    :func:`golden.umdam.generator_beats`."""
    layout_c, layout_o = _layouts(block, "cmd", "o")
    slots = 1 << layout_c["base_tile"].width
    commands, beats = [], []
    while len(commands) < count:
        command = (rng.randint(1, min(_TILE_SIDE, params.max_rows)),
                   rng.randint(1, min(_TILE_SIDE, params.max_cols)),
                   rng.randrange(slots), rng.choice(_ORDERS))
        got = umdam_golden.generator_beats(params.address_mapping, params.elem_bytes,
                                           params.max_rows, params.max_cols, *command)
        if got[0].get("error"):
            continue                        # past the last tile slot: draw again
        commands.append(command)
        beats += got
    stimulus = [pack(layout_c, {"rows": r, "cols": c, "base_tile": b,
                                "order": _ORDERS.index(order)}) for r, c, b, order in commands]
    return Vectors({"cmd": stimulus}, {"o": [pack(layout_o, beat) for beat in beats]})


def _signed(rng: random.Random, bits: int) -> int:
    return rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))


def _requant(params, block, rng: random.Random, count: int) -> Vectors:
    """Random ``x``, ``m`` and a shift that lands most results inside the clamp range (some
    saturate): ``y`` from :func:`golden.arith.requant.requantize`."""
    layout_i, layout_o = _layouts(block, "i", "o")
    shift_max = (1 << layout_i["shift"].width) - 1
    x = [_signed(rng, params.in_bits) for _ in range(count)]
    m = [_signed(rng, params.mult_bits) if params.mult_signed
         else rng.randrange(1 << params.mult_bits) for _ in range(count)]
    shift = [max(0, min(shift_max, abs(a * b).bit_length() - params.out_bits
                        + rng.randint(-2, 3))) for a, b in zip(x, m)]
    y = requant_golden.requantize(x, m, shift, out_bits=params.out_bits, clamp=params.clamp)
    return Vectors({"i": [pack(layout_i, {"x": a, "m": b, "shift": s})
                          for a, b, s in zip(x, m, shift)]},
                   {"o": [pack(layout_o, {"y": int(v)}) for v in y]})


def _idot(params, block, rng: random.Random, count: int) -> Vectors:
    """Random operand vectors, a fifth of them drawn from the extremes only: the exact dot
    product from :func:`golden.arith.idot.dot`."""
    layout_i, layout_o = _layouts(block, "i", "o")

    def operand(bits, extreme):
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return rng.choice((lo, hi)) if extreme else rng.randint(lo, hi)

    a, b = [], []
    for _ in range(count):
        extreme = rng.random() < 0.2
        a.append([operand(params.a_bits, extreme) for _ in range(params.lanes)])
        b.append([operand(params.b_bits, extreme) for _ in range(params.lanes)])
    y = [int(v) for v in idot_golden.dot(np.array(a, dtype=np.int64), np.array(b, dtype=np.int64))]
    return Vectors({"i": [pack(layout_i, {"a": u, "b": v}) for u, v in zip(a, b)]},
                   {"o": [pack(layout_o, {"y": v}) for v in y]})


def _float_pairs(params, block, rng: random.Random, count: int, fmts, add: bool):
    """``count`` operand pairs drawn from :func:`golden.arith.float.operand_pairs` (corner
    codes, random codes, pairs near overflow or cancellation), with the layouts."""
    layout_i, layout_o = _layouts(block, "i", "o")
    np_rng = _np_rng(rng)
    a, b = float_golden.operand_pairs(np_rng, fmts[0], fmts[1], count, add=add)
    pick = np_rng.choice(len(a), size=count, replace=count > len(a))
    return layout_i, layout_o, np.asarray(a)[pick], np.asarray(b)[pick]


def _fpmul(params, block, rng: random.Random, count: int) -> Vectors:
    """Operand pairs: the product rounded once, from :func:`golden.arith.float.fmul`."""
    fmts = [float_format(f) for f in (params.a_fmt, params.b_fmt, params.out_fmt)]
    layout_i, layout_o, a, b = _float_pairs(params, block, rng, count, fmts, add=False)
    y = float_golden.fmul(a, b, *fmts)
    return Vectors({"i": [pack(layout_i, {"a": int(u), "b": int(v)}) for u, v in zip(a, b)]},
                   {"o": [pack(layout_o, {"y": int(v)}) for v in y]})


def _fpadd(params, block, rng: random.Random, count: int) -> Vectors:
    """Operand pairs (near-cancelling ones included): the sum from
    :func:`golden.arith.float.fadd`."""
    fmt = float_format(params.fmt)
    layout_i, layout_o, a, b = _float_pairs(params, block, rng, count, (fmt, fmt), add=True)
    y = float_golden.fadd(a, b, fmt)
    return Vectors({"i": [pack(layout_i, {"a": int(u), "b": int(v)}) for u, v in zip(a, b)]},
                   {"o": [pack(layout_o, {"y": int(v)}) for v in y]})


def _unary(block, x, y) -> Vectors:
    """One operand ``x`` in, one result ``y`` out, per item."""
    layout_i, layout_o = _layouts(block, "i", "o")
    return Vectors({"i": [pack(layout_i, {"x": int(v)}) for v in x]},
                   {"o": [pack(layout_o, {"y": int(v)}) for v in y]})


def _fpmac(params, block, rng: random.Random, count: int) -> Vectors:
    """Operand pairs and random addends of the accumulator's format, two fifths of them the
    product's negation with low bits changed (cancellation): :func:`~golden.arith.float.fmac`."""
    fmt, acc = float_format(params.in_fmt), float_format(params.acc_fmt)
    layout_i, layout_o, a, b = _float_pairs(params, block, rng, count, (fmt, fmt), add=False)
    np_rng = _np_rng(rng)
    product = float_golden.fmul(a, b, fmt, fmt, acc).astype(np.uint64)
    c = float_golden.random_codes(np_rng, acc, count, exp_spread=20).astype(np.uint64)
    near = (product ^ np.uint64(1 << (acc.width - 1))) ^ np_rng.integers(0, 256, count).astype(
        np.uint64)
    c = np.where(np_rng.random(count) < 0.4, near, c) & np.uint64((1 << acc.width) - 1)
    y = float_golden.fmac(a, b, c, fmt, acc)
    return Vectors({"i": [pack(layout_i, {"a": int(u), "b": int(v), "c": int(w)})
                          for u, v, w in zip(a, b, c)]},
                   {"o": [pack(layout_o, {"y": int(v)}) for v in y]})


def _fdot(params, block, rng: random.Random, count: int) -> Vectors:
    """Operand rows near 1.0 (so that most sums stay finite), a quarter drawn from the corner
    and random pairs: :func:`~golden.arith.float.fdot`."""
    fmt, acc, lanes = float_format(params.in_fmt), float_format(params.acc_fmt), params.lanes
    layout_i, layout_o, a, b = _float_pairs(params, block, rng, count * lanes, (fmt, fmt),
                                            add=False)
    np_rng = _np_rng(rng)
    a, b = a.reshape(count, lanes), b.reshape(count, lanes)
    tame = np_rng.random(count) >= 0.25
    for x in (a, b):
        x[tame] = float_golden.random_codes(np_rng, fmt, int(tame.sum()) * lanes,
                                            exp_spread=6).reshape(-1, lanes)
    y = float_golden.fdot(a, b, fmt, acc)
    return Vectors({"i": [pack(layout_i, {"a": [int(v) for v in r], "b": [int(v) for v in t]})
                          for r, t in zip(a, b)]},
                   {"o": [pack(layout_o, {"y": int(v)}) for v in y]})


def _fpconv(params, block, rng: random.Random, count: int) -> Vectors:
    """Uniform codes and codes with exponents across the result format's range:
    :func:`~golden.arith.float.fconvert`."""
    fmt, out = float_format(params.in_fmt), float_format(params.out_fmt)
    np_rng = _np_rng(rng)
    x = np.concatenate([float_golden.random_codes(np_rng, fmt, count),
                        float_golden.random_codes(np_rng, fmt, count, exp_spread=out.bias + 2)])
    x = np_rng.permutation(x)[:count]
    return _unary(block, x, float_golden.fconvert(x, fmt, out))


def _int2fp(params, block, rng: random.Random, count: int) -> Vectors:
    """Two's-complement integers of every length: :func:`~golden.arith.float.int_to_float`."""
    bits = params.int_bits
    x = [rng.getrandbits(rng.randint(1, bits)) * rng.choice((1, -1)) % (1 << bits)
         for _ in range(count)]
    return _unary(block, x, float_golden.int_to_float(x, bits, float_format(params.fmt)))


def _function(name: str, argument: str):
    """A generator for the fp32 function unit :mod:`golden.arith.func` calls ``name``: uniform
    bit patterns and codes within 16 binades of 1.0."""
    def generate(params, block, rng: random.Random, count: int) -> Vectors:
        np_rng = _np_rng(rng)
        near = float_golden.random_codes(np_rng, FP32, count, exp_spread=16)
        x = np.where(np_rng.random(count) < 0.5, near,
                     np_rng.integers(0, 1 << 32, count, dtype=np.uint64)).astype(np.uint32)
        return _unary(block, x, getattr(func_golden, name)(x, getattr(params, argument)))
    return generate


#: Longest sequence of a drawn FlowKV decode step: a few chunks, a few hundred beats per step.
_FLOWKV_TOKENS = 24
#: The largest K and N of a FusedDQP board command: a few hundred cycles each at 8 lanes.
_DQP_INPUTS, _DQP_OUTPUTS = 256, 64


def _flowkv(params, block, rng: random.Random, count: int) -> Vectors:
    """``count`` decode steps (random length, position and, for a third of them, a sliding
    window; N(0, 1) operands in BF16) on the tile pair, or on every pair of an array (one
    command, each pair its own operands): the rows each step streams from
    :func:`golden.flowkv.streamed_rows`, its output beats from :func:`golden.flowkv.attend`."""
    cfg = FlowKVConfig(**params.pair_args())
    pairs = getattr(params, "pairs", None)
    names = [("q", "k", "v", "o")] if pairs is None else \
        [(f"q{n}", f"k{n}", f"v{n}", f"o{n}") for n in range(pairs)]
    layout_c, layout_q, layout_o = _layouts(block, "cmd", names[0][0], names[0][3])
    np_rng = _np_rng(rng)
    lanes = cfg.lanes

    def beats(rows):
        return [pack(layout_q, {"data": [int(x) for x in row[b * lanes:(b + 1) * lanes]]})
                for row in rows for b in range(cfg.beats)]

    out = Vectors({"cmd": [], **{n: [] for q, k, v, _ in names for n in (q, k, v)}},
                  {o: [] for *_, o in names})
    for _ in range(count):
        length = rng.randint(1, min(_FLOWKV_TOKENS, cfg.max_tokens))
        position = rng.randrange(length)
        window = rng.randint(1, length) if rng.random() < 1 / 3 else None
        rows = flowkv_golden.streamed_rows(length, position, chunk=cfg.chunk, window=window)
        out.stimulus["cmd"].append(pack(layout_c, {"position": position, "length": length,
                                                   "window": window or 0,
                                                   "sliding": int(window is not None)}))
        for q_name, k_name, v_name, o_name in names:
            q, K, V = (float_golden.from_float(np_rng.standard_normal(shape), BF16)
                       for shape in ((cfg.group, cfg.head_dim), (length, cfg.head_dim),
                                     (length, cfg.head_dim)))
            O = flowkv_golden.attend(q, K, V, position, chunk=cfg.chunk, lanes=lanes,
                                     window=window, out_fmt=cfg.out_fmt)
            out.stimulus[q_name].extend(beats(q))
            out.stimulus[k_name].extend(beats(K[rows]))
            out.stimulus[v_name].extend(beats(V[rows]))
            out.expected[o_name].extend(
                pack(layout_o, {"data": [int(x) for x in O[h, b * lanes:(b + 1) * lanes]],
                                "head": h, "beat": b, "error": 0,
                                "last": int(h == cfg.group - 1 and b == cfg.beats - 1)})
                for h in range(cfg.group) for b in range(cfg.beats))
    return out


def _dqp(params, block, rng: random.Random, count: int) -> Vectors:
    """``count`` FusedDQP commands of random shape (``K`` a multiple of 32, ``N`` of the tile,
    both within the limits and at most 256 x 64), a third of them dequantizations and a third of
    the GEMVs with bf16 results, on random Q4NX weights and N(0, 1) bf16 activations (the same
    activation for every tile): ``y`` from :func:`golden.flowkv_dqp.gemm`, ``w`` from
    :func:`golden.flowkv_dqp.dequantize`."""
    cfg = params.config()
    layouts = dict(zip(("cmd", "q", "a", "y", "w"), _layouts(block, "cmd", "q", "a", "y", "w")))
    np_rng = _np_rng(rng)
    out = Vectors({"cmd": [], "q": [], "a": []}, {"y": [], "w": []})
    for _ in range(count):
        K = 32 * rng.randint(1, min(cfg.max_inputs, _DQP_INPUTS) // 32)
        N = cfg.tile * rng.randint(1, max(1, min(cfg.max_outputs, _DQP_OUTPUTS) // cfg.tile))
        w = random_q4nx(np_rng, N, K)
        kind = rng.randrange(3)
        a = None if kind == 0 else float_golden.from_float(np_rng.standard_normal(K), BF16)
        bf16 = kind == 2
        streams = job_streams(cfg, w, a, bf16=bf16)
        # The testbench's items name array elements as "data.i"; pack takes the array.
        streams["a"] = [{"data": [item[f"data.{i}"] for i in range(cfg.lanes)]}
                        for item in streams["a"]]
        for name, items in streams.items():
            out.stimulus[name].extend(pack(layouts[name], item) for item in items)
        weights = dequantize(w)
        if a is None:
            # The weights leave in the records' order: tile, group, row of the tile.
            beats = weights.reshape(N // cfg.tile, cfg.tile, K // 32, 32).transpose(
                0, 2, 1, 3).reshape(-1, cfg.lanes)
            out.expected["w"].extend(
                pack(layouts["w"], {"data": [int(x) for x in beat],
                                    "last": int(i == len(beats) - 1)})
                for i, beat in enumerate(beats))
            continue
        y = gemm(weights, a[None])[0]
        if bf16:
            y = float_golden.fconvert(y, FP32, BF16)
        out.expected["y"].extend(pack(layouts["y"], {"data": int(v), "last": int(i == N - 1)})
                                 for i, v in enumerate(y))
    return out


def _edram(params, block, rng: random.Random, count: int) -> Vectors:
    """Writes of random BF16 words to distinct addresses (one tensor class per row, as the
    controller requires), then reads of written addresses in random order: each read gives the
    word (:func:`golden.edram.split` into its segments and :func:`golden.edram.merge` back),
    its row live, no error. The FPGA stand-ins do not decay, so every word survives."""
    layout_r, layout_o = _layouts(block, "req", "resp")
    words = params.banks * params.rows * params.cols
    writes = min(words, (count + 1) // 2)
    addrs = rng.sample(range(words), writes)
    row_class, data, stimulus = {}, {}, []
    for a in addrs:
        cls = row_class.setdefault(a // params.cols, rng.choice(list(TensorClass)))
        data[a] = rng.randrange(1 << 16)
        stimulus.append(pack(layout_r, {"op": Op.WRITE, "cls": cls, "addr": a,
                                        "data": data[a], "last": a}))
    expected = []
    for _ in range(count - writes):
        a = rng.choice(addrs)
        stimulus.append(pack(layout_r, {"op": Op.READ, "cls": row_class[a // params.cols],
                                        "addr": a, "data": 0, "last": a}))
        word = int(edram_golden.merge(*edram_golden.split(data[a])))
        expected.append(pack(layout_o, {"data": word, "live": 1, "error": 0}))
    return Vectors({"req": stimulus}, {"resp": expected})


#: Largest rows and columns of a drawn in-flash GEMV: one to four pages of weights each.
_GEMV_SIDE = 8, 16
#: An x lane past ``cols`` (a NaN): the PE ignores it.
_X_PAD = 0x7E00


def _inflash(params, block, rng: random.Random, count: int) -> Vectors:
    """``count`` fp16 or bf16 GEMVs on random weights at a random first page: the page reads
    the PE must issue on ``rd_cmd`` (whole pages, the last one short; docs/inflash.md
    section 3), the flash's answers on ``rd_data`` (the page images of
    :func:`golden.inflash.weight_pages`, cut into ``transfer_bytes`` words, the last padded
    with erased bytes) and each row's result on ``y`` from :func:`golden.inflash.gemv`. The
    flash's answers are stimulus: the PE takes them in the order it asked for them."""
    layout_c, layout_x, layout_d, layout_r, layout_y = _layouts(block, "cmd", "x", "rd_data",
                                                                "rd_cmd", "y")
    geometry, P = params.geometry(), params.page_bytes
    W, F = params.transfer_bytes, params.fmacs
    np_rng = _np_rng(rng)
    out = Vectors({"cmd": [], "x": [], "rd_data": []}, {"rd_cmd": [], "y": []})
    for _ in range(count):
        mode = rng.choice((Mode.FP16, Mode.BF16))
        fmt = float_format(mode.name.lower())
        rows, cols = (rng.randint(1, min(side, limit)) for side, limit in
                      zip(_GEMV_SIDE, (params.max_rows, params.max_cols)))
        w = inflash_golden.Weights(mode.name.lower(), float_golden.from_float(
            np_rng.standard_normal((rows, cols)) * 2.0 ** np_rng.integers(-4, 5, (rows, cols)),
            fmt))
        x = float_golden.from_float(np_rng.standard_normal(cols), fmt).astype(np.int64)
        images = inflash_golden.weight_pages(w, page_bytes=P)
        page = rng.randrange(geometry.pages - len(images) + 1)
        size = inflash_golden.stream_bytes(mode.name.lower(), rows, cols)
        out.stimulus["cmd"].append(pack(layout_c, {"op": InflashOp.GEMV, "mode": mode,
                                                   "rows": rows, "cols": cols, "page": page}))
        lanes = np.full(-(-cols // F) * F, _X_PAD, np.int64)
        lanes[:cols] = x
        out.stimulus["x"].extend(pack(layout_x, {"data": [int(v) for v in lanes[b:b + F]]})
                                 for b in range(0, len(lanes), F))
        for k, image in enumerate(images):
            nbytes = min(P, size - k * P)
            out.expected["rd_cmd"].append(pack(layout_r, {"page": page + k, "column": 0,
                                                          "bytes": nbytes, "run": nbytes,
                                                          "stride": nbytes}))
            padded = np.full(-(-nbytes // W) * W, inflash_golden.ERASED, np.uint8)
            padded[:nbytes] = image[:nbytes]
            words = padded.reshape(-1, W)
            out.stimulus["rd_data"].extend(
                pack(layout_d, {"data": [int(b) for b in word], "last": int(j == len(words) - 1)})
                for j, word in enumerate(words))
        y = inflash_golden.gemv(w, x)
        out.expected["y"].extend(pack(layout_y, {"value": int(v) & 0xFFFFFFFF, "error": 0,
                                                 "last": int(r == rows - 1)})
                                 for r, v in enumerate(y))
    return out


#: Outputs and chunks of a matrix loaded into a VAC at most, and the memory each matrix loaded
#: goes to, in drawing order (as long as rows and PPU entries last): a few dozen rows, each
#: met by several GEMVs.
_VAC_OUTPUTS, _VAC_CHUNKS = 6, 4
_VAC_MATRICES = ("wmem", "kv", "wmem", "kv", "wmem", "wmem")
#: Spread of a VAC accumulator over uniform INT8 weights and activations, per sqrt(inputs)
#: (about 74 ** 2): the PPU scale that spreads the results over the INT8 range follows from it.
_ACC_SPREAD = 5500.0
#: Fraction bits an RC factor keeps: a tile's RMSNorm and softmax defaults (``hdl.rdxe.DxtConfig``;
#: a VAC alone has neither).
_RC_FRACS = (DxtConfig.norm_frac, DxtConfig.prob_frac)


def _ppu_entry(rng: random.Random, scale: float, mult_bits: int) -> tuple[int, int]:
    """A PPU multiplier (random sign) and shift whose ratio is ``scale`` within a factor of 2
    (``golden.rdxe.ppu_code`` of a scale drawn around it)."""
    m, shift = rdxe_golden.ppu_code(scale * 2.0 ** rng.uniform(-1, 1), mult_bits)
    return m * rng.choice((1, -1)), shift


def _packed_loads(loads: dict, layouts: dict, rng: random.Random) -> dict[str, list[int]]:
    """Each stream's loads (field mappings) in random order, packed: a load's place, not its
    turn, says where it goes."""
    for items in loads.values():
        rng.shuffle(items)
    return {name: [pack(layouts[name], item) for item in items] for name, items in loads.items()}


def _vac_load(cfg, rng: random.Random, layouts: dict) -> tuple[list[dict], dict]:
    """Matrices for a VAC's WMEM and KV cache: their weights, places and PPU entries, and the
    loads that put them there, in random order (the KV cache's rows as two writes with
    complementary byte enables, the bytes a write does not enable random)."""
    L, matrices = cfg.lanes, []
    setup = {"wmem": [], "kv": [], "ppu": []}
    rows, entry = {"wmem": 0, "kv": 0}, 0
    depth = {"wmem": cfg.wmem_depth, "kv": cfg.kv_rows}
    for memory in _VAC_MATRICES:
        row = rows[memory]
        M = rng.randint(1, max(1, min(_VAC_OUTPUTS, cfg.ppu_depth - entry, depth[memory] - row)))
        if entry + M > cfg.ppu_depth or row + M > depth[memory]:
            continue                            # the table or the memory is full
        C = rng.randint(1, min(_VAC_CHUNKS, (depth[memory] - row) // M))
        K = rng.randint((C - 1) * L + 1, C * L)
        W = np.zeros((M, C * L), np.int64)
        W[:, :K] = [[rng.randint(-128, 127) for _ in range(K)] for _ in range(M)]
        scale = 60 / (_ACC_SPREAD * math.sqrt(K))
        ppu = [_ppu_entry(rng, scale, cfg.mult_bits) for _ in range(M)]
        matrices.append({"W": W[:, :K], "K": K, "C": C, "row": row, "entry": entry,
                         "kv": memory == "kv", "m": [m for m, _ in ppu],
                         "shift": [s for _, s in ppu]})
        for r in range(M * C):
            data = [int(v) for v in W[r // C, (r % C) * L:(r % C + 1) * L]]
            if memory == "wmem":
                setup["wmem"].append({"addr": row + r, "data": data})
                continue
            en = rng.getrandbits(L)
            for mask in (en, ~en & ((1 << L) - 1)):
                setup["kv"].append({"addr": row + r, "en": mask, "data": [
                    v if mask >> k & 1 else rng.randint(-128, 127) for k, v in enumerate(data)]})
        setup["ppu"] += [{"addr": entry + p, "m": m, "shift": s} for p, (m, s) in enumerate(ppu)]
        rows[memory], entry = row + M * C, entry + M
    return matrices, _packed_loads(setup, layouts, rng)


def _rc_factor(rng: random.Random, cfg) -> rdxe_golden.RCFactor:
    """An RC factor as the vector engine gives it: ``golden.rdxe.to_rc`` of an fp32 value near
    ``2**-frac`` (a gain near 1 on the accumulator), one in ten 0 or +inf (flushed,
    saturated)."""
    frac = rng.choice(_RC_FRACS)
    value = rng.choice((0.0, math.inf)) if rng.random() < 0.1 else \
        2.0 ** (rng.uniform(-1, 1) - frac)
    return rdxe_golden.to_rc(np.uint32(float_golden.from_float(np.float64(value), FP32)), frac,
                             cfg)


def _vac(params, block, rng: random.Random, count: int) -> Vectors:
    """Weights loaded first (``setup``: up to four matrices into the WMEM and two into the KV
    cache, their PPU entries), then ``count`` GEMVs streamed against them: each a loaded
    matrix, random INT8 activations, plain or (half of them) fused with an RC factor on ``rc``.
    ``o`` from ``golden.rdxe``: ``ppu(accumulate(W, x))``, or ``ppu(rcu(...))`` when fused;
    ``hlink_o``: every chunk, forwarded unchanged."""
    names = ("hlink_i", "wmem", "kv", "ppu", "rc", "o")
    layouts = dict(zip(names, _layouts(block, *names)))
    L = params.lanes
    matrices, setup = _vac_load(params, rng, layouts)
    chunks, factors, results = [], [], []
    for _ in range(count):
        mx = rng.choice(matrices)
        M, K, C = len(mx["m"]), mx["K"], mx["C"]
        x = [rng.randint(-128, 127) for _ in range(K)]
        padded = x + [0] * (C * L - K)
        acc = rdxe_golden.accumulate(mx["W"], np.array(x))
        fused = rng.random() < 0.5
        if fused:
            rc = _rc_factor(rng, params)
            acc = rdxe_golden.rcu(acc, rc)
            factors.append(pack(layouts["rc"], {"m": int(rc.m), "shift": int(rc.shift)}))
        y = rdxe_golden.ppu(acc, np.array(mx["m"]), np.array(mx["shift"]), params)
        results += [pack(layouts["o"], {"y": int(v)}) for v in y]
        chunks += [pack(layouts["hlink_i"], {
            "data": padded[j * L:(j + 1) * L], "row": mx["row"] + p * C + j,
            "first": int(j == 0), "last": int(j == C - 1), "out": mx["entry"] + p,
            "rcu": int(fused), "rc_last": int(fused and p == M - 1), "kv": int(mx["kv"])})
            for p in range(M) for j in range(C)]
    return Vectors({"hlink_i": chunks, "rc": factors}, {"hlink_o": chunks, "o": results}, setup)


#: Matrices loaded into a DXT's WMEMs: each a plain GEMV's or an RMSNorm-GEMV's (its PPU scale
#: follows), up to 3 passes of the VACs and 5 chunks.
_DXT_MATRICES = ("gemv", "rmsnorm", "gemv", "rmsnorm")
_DXT_PASSES, _DXT_CHUNKS = 3, 5
#: The RMSNorm epsilon and the activations' step it is expressed in, the real value of one score
#: step of Q.K^T, and the PPU scale of P.V's outputs (the DXT testbench's).
_RMS_EPS, _RMS_STEP, _SCORE_STEP, _PV_SCALE = 1e-5, 0.05, 0.15, 1 / 100
#: Tokens of an attention episode (a multiple of four: its scores fill whole GBUS words) and the
#: share of commands that start one.
_EPISODE_TOKENS, _EPISODE_SHARE = (4, 8), 0.25


def _dxt_matrix(cfg, W, ppu, row: int, entry: int, setup: dict, kind: str) -> dict:
    """Lay ``W`` out in the VACs' WMEMs from ``row`` (``golden.rdxe.wmem_image``: output ``o``
    on VAC ``o mod N`` in pass ``o // N``), its PPU entries (one per output, ``(m, shift)``)
    from ``entry``; return what a command on it needs."""
    N, (M, K) = cfg.vacs, W.shape
    C, P = -(-K // cfg.lanes), -(-M // N)
    image = rdxe_golden.wmem_image(W, cfg)
    setup["wmem"] += [{"vac": v, "addr": row + r, "data": [int(b) for b in image[v, r]]}
                      for v in range(N) for r in range(P * C)]
    setup["ppu"] += [{"vac": o % N, "addr": entry + o // N, "m": m, "shift": sh}
                     for o, (m, sh) in enumerate(ppu)]
    return {"kind": kind, "W": W, "K": K, "C": C, "row": row, "entry": entry,
            "m": np.array([m for m, _ in ppu[:M]]), "shift": np.array([sh for _, sh in ppu[:M]])}


def _dxt_load(cfg, rng: random.Random, layouts: dict) -> tuple[list[dict], dict, dict]:
    """Matrices for a DXT, their outputs a multiple of four so that every GBUS word of results
    is whole (the bytes a partial word does not keep carry no meaning); the identity that writes
    keys and values; the PPU entries of Q.K^T (every VAC's the same scale) and P.V (one per
    channel). The loads in random order."""
    N, L, d, matrices = cfg.vacs, cfg.lanes, cfg.head_dim, []
    setup, row, entry = {"wmem": [], "ppu": []}, 0, 0
    for kind in _DXT_MATRICES:
        P, C = rng.randint(1, _DXT_PASSES), rng.randint(1, min(_DXT_CHUNKS, cfg.chunks))
        M = max(GBUS_BYTES, (rng.randint((P - 1) * N + 1, P * N) // GBUS_BYTES) * GBUS_BYTES)
        P = -(-M // N)
        if row + P * C > cfg.wmem_depth or entry + P > cfg.ppu_depth:
            continue
        K = rng.randint((C - 1) * L + 1, C * L)
        W = np.array([[rng.randint(-128, 127) for _ in range(K)] for _ in range(M)], np.int64)
        scale = (60 / _ACC_SPREAD if kind == "gemv" else 1 / 20) / math.sqrt(K)
        ppu = [_ppu_entry(rng, scale, cfg.mult_bits) for _ in range(P * N)]
        matrices.append(_dxt_matrix(cfg, W, ppu, row, entry, setup, kind))
        row, entry = row + P * C, entry + P
    P, C = -(-d // N), -(-d // L)
    attention = {"identity": _dxt_matrix(cfg, np.eye(d, dtype=np.int64), [(1, 0)] * (P * N),
                                         row, entry, setup, "identity"),
                 "qk_entry": entry + P, "pv_entry": entry + P + 1,
                 "score": _ppu_entry(rng, 60 / (_ACC_SPREAD * math.sqrt(d)), cfg.mult_bits),
                 "out": [_ppu_entry(rng, _PV_SCALE, cfg.mult_bits) for _ in range(d)]}
    if row + P * C > cfg.wmem_depth or entry + 2 * P + 1 > cfg.ppu_depth:
        attention = None                        # no room: GEMVs only
    else:
        m, sh = attention["score"]
        setup["ppu"] += [{"vac": v, "addr": entry + P, "m": m, "shift": sh} for v in range(N)]
        setup["ppu"] += [{"vac": e % N, "addr": entry + P + 1 + e // N, "m": m, "shift": sh}
                         for e, (m, sh) in enumerate(attention["out"])]
    return matrices, attention, _packed_loads(setup, layouts, rng)


def _dxt_gemv(params, rng: random.Random, mx: dict, fields: dict) -> tuple[list[int], np.ndarray]:
    """A GEMV or RMSNorm-GEMV on ``mx`` with random activations: its chunks' activations (zero
    padded) and results, its command's fields set in ``fields``."""
    (M, K), C = mx["W"].shape, mx["C"]
    x = [rng.randint(-128, 127) for _ in range(K)] + [0] * (C * params.lanes - K)
    fields.update(outputs=M, chunks=C, row=mx["row"], entry=mx["entry"], op=OPS.index(mx["kind"]))
    if mx["kind"] != "rmsnorm":
        return x, rdxe_golden.gemv(mx["W"], np.array(x[:K]), mx["m"], mx["shift"], params)
    mode = rng.choice(rdxe_golden.MODES)
    eps = int(rdxe_golden.eps_code(_RMS_EPS, _RMS_STEP))
    inv_k = int(float_golden.from_float(np.float64(1 / K), FP32))
    fields.update(seq=int(mode == "sequential"), inv_k=inv_k, eps=eps)
    return x, rdxe_golden.rmsnorm_gemv(mx["W"], np.array(x[:K]), mx["m"], mx["shift"],
                                       np.uint32(eps), params, mode=mode, inv_k=np.uint32(inv_k))


def _dxt_episode(params, rng: random.Random, att: dict, tokens: int) -> list:
    """An attention episode of ``tokens`` tokens for a random head: each token's key and value
    written through the identity GEMV (values in the clamp range, as a PPU gives them), Q.K^T
    of a random query, P.V (fused or sequential) of its scores: ``(fields, x, results)`` per
    command, the results from ``golden.rdxe.qk_scores`` and ``softmax_pv``."""
    d, head = params.head_dim, rng.randrange(params.heads)
    group, lo = head // params.group_size, -127 if params.clamp == "symmetric" else -128
    K, V = ([[rng.randint(lo, 127) for _ in range(d)] for _ in range(tokens)] for _ in "kv")
    ident, out = att["identity"], []
    for t in range(tokens):
        for dest, rows in (("key", K), ("value", V)):
            out.append(({"op": OPS.index("gemv"), "dest": DESTS.index(dest), "head": group,
                         "tokens": t, "outputs": d, "chunks": ident["C"], "row": ident["row"],
                         "entry": ident["entry"]}, rows[t], None))
    q = [rng.randint(-128, 127) for _ in range(d)]
    _, scores = rdxe_golden.qk_scores(np.array(q), np.array(K), *att["score"], params)
    out.append(({"op": OPS.index("qk"), "entry": att["qk_entry"], "head": head,
                 "tokens": tokens}, q, scores))
    mode, scale = rng.choice(rdxe_golden.MODES), rdxe_golden.log2_scale(_SCORE_STEP)
    m, shift = (np.array(v) for v in zip(*att["out"]))
    y = rdxe_golden.softmax_pv(scores, np.array(V), scale, m, shift, params, mode=mode)
    out.append(({"op": OPS.index("pv"), "seq": int(mode == "sequential"),
                 "entry": att["pv_entry"], "head": head, "tokens": tokens, "scale": int(scale)},
                [], y))
    return out


def _dxt(params, block, rng: random.Random, count: int) -> Vectors:
    """Weights loaded first (``setup``: up to four matrices, the identity, their PPU entries and
    attention's), then ``count`` commands on ``cmd`` with their token chunks on ``x``: plain
    GEMVs and RMSNorm-GEMVs (fused or sequential, ``inv_k`` fp32(1/K)) of random INT8
    activations on a loaded matrix, and a quarter of the time, while commands are left for
    one, an attention episode (:func:`_dxt_episode`). ``o``: the results four to a GBUS word;
    ``resp``: no error, one per command."""
    names = ("cmd", "x", "wmem", "ppu", "o", "resp")
    layouts = dict(zip(names, _layouts(block, *names)))
    L = params.lanes
    matrices, attention, setup = _dxt_load(params, rng, layouts)
    episode = [t for t in _EPISODE_TOKENS if t <= params.capacity] if attention else []
    commands = []
    while len(commands) < count:
        fits = [t for t in episode if 2 * t + 2 <= count - len(commands)]
        if fits and rng.random() < _EPISODE_SHARE:
            commands += _dxt_episode(params, rng, attention, rng.choice(fits))
            continue
        fields = {}
        x, y = _dxt_gemv(params, rng, rng.choice(matrices), fields)
        commands.append((fields, x, y))
    out = Vectors({"cmd": [], "x": []}, {"o": [], "resp": []}, setup)
    blank = dict.fromkeys(("seq", "dest", "outputs", "chunks", "row", "entry", "head", "tokens",
                           "inv_k", "eps", "scale"), 0)
    for fields, x, y in commands:
        out.stimulus["cmd"].append(pack(layouts["cmd"], {**blank, **fields}))
        x = x + [0] * (-len(x) % L)
        out.stimulus["x"] += [pack(layouts["x"], {"data": x[j:j + L]}) for j in range(0, len(x), L)]
        out.expected["o"] += [] if y is None else [pack(layouts["o"], {
            "data": [int(v) for v in y[w:w + GBUS_BYTES]], "keep": (1 << GBUS_BYTES) - 1,
            "last": int(w + GBUS_BYTES == len(y))}) for w in range(0, len(y), GBUS_BYTES)]
        out.expected["resp"].append(pack(layouts["resp"], {"error": 0}))
    return out


def _dxe(params, block, rng: random.Random, count: int) -> Vectors:
    """The reduced layer of :func:`sim.rdxe.host.board_layer` (its tables fixed: the board form
    holds its plain inputs) and ``count`` tokens of it, their inputs drawn from the seed. Setup:
    :func:`~sim.rdxe.host.host_loads`' WMEM rows and PPU entries, and on ``host`` the TB and
    rr-SRAM cleared, the program and the constants written (the engine's testbench's loads).
    Then the GEMV tables (registers, which the harness's reset before the run clears), and on
    ``host`` the program and constants read back and per token its inputs written, a run of the
    whole program and the TB and rr-SRAM rows the layer uses read back (every row it writes). ``done`` and ``ext_data`` from
    :class:`~sim.rdxe.host.DxeModel` fed the same items in order (``golden.rdxe.assemble.
    run_words`` on its mirror of the memories)."""
    capacity = params.dxt_config().capacity
    if count > capacity:
        raise ParameterError(f"rdxe-dxe vector count (--vectors) is tokens of the reduced layer, "
                             f"1 to {capacity} (its KV cache's capacity), not {count}")
    names = ("host", "table", "wmem", "ppu", "done", "ext_data")
    layouts = dict(zip(names, _layouts(block, *names)))
    try:
        board = board_layer(params, count, rng.randrange(1 << 32))
    except ValueError as exc:
        raise ParameterError(str(exc)) from None
    model, L = DxeModel(params, board.asm, board.views), params.lanes
    out = Vectors({"host": [], "table": []}, {"done": [], "ext_data": []},
                  {"host": [], "wmem": [], "ppu": []})

    host_codec = PayloadCodec.of_layout(layouts["host"])

    def host(items, kind=HostItem.EXT, into=out.stimulus):
        for item in items:
            answer = model.ext(item) if kind == HostItem.EXT else model.run(item)
            into["host"].append(host_codec.pack({
                "kind": kind.value, **{f"{kind.name.lower()}.{k}": v for k, v in item.items()}},
                wrap=True))
            stream = "ext_data" if kind == HostItem.EXT else "done"
            out.expected[stream] += [pack(layouts[stream], a) for a in answer]

    def reads(store: Store, rows: int):
        host({"store": store.value, "row": r, "write": 0, "data": 0, "mask": 0}
             for r in range(rows))

    for name in ("wmem", "ppu"):
        codec = PayloadCodec.of_layout(layouts[name])
        out.setup[name] = [codec.pack(item, wrap=True) for item in board.streams[name]]
    host(board.streams["ext"], into=out.setup)
    table = PayloadCodec.of_layout(layouts["table"])
    out.stimulus["table"] = [table.pack(t, wrap=True) for t in board.streams["table"]]
    reads(Store.PROG, len(board.asm.words))
    reads(Store.CONST, -(-len(board.views[0].vectors.words) // L))
    used = board.asm.used           # the rows the layer writes lie within its storage
    for inputs in board.layer.tokens:
        for name, value in inputs.items():
            host(ext_writes(Store.TB, board.asm.inputs[name] // L,
                            row_values(np.asarray(value, np.uint32), L, 32), L))
        host([{"pc": 0, "count": len(board.asm.words)}], HostItem.RUN)
        reads(Store.TB, -(-used["tb_words"] // L))
        reads(Store.RR, -(-used["rr_bytes"] // L))
    return out


#: Block name -> ``generator(params, component, rng, count) -> Vectors``; ``count`` is the
#: number of items per sink (commands, for a block that answers a command with many items;
#: tokens of the reduced layer for ``rdxe-dxe``).
GENERATORS: dict[str, Callable[[BlockParams, object, random.Random, int], Vectors]] = {
    "umdam": _umdam,
    "umdam-tilegen": _tilegen,
    "umdam-composer": _composer,
    "arith-requant": _requant,
    "arith-idot": _idot,
    "arith-fpmul": _fpmul,
    "arith-fpadd": _fpadd,
    "arith-fpmac": _fpmac,
    "arith-fdot": _fdot,
    "arith-fpconv": _fpconv,
    "arith-int2fp": _int2fp,
    "arith-exp2": _function("exp2", "table_bits"),
    "arith-recip": _function("reciprocal", "iterations"),
    "arith-rsqrt": _function("rsqrt", "iterations"),
    "flowkv": _flowkv,
    "flowkv-array": _flowkv,
    "flowkv-dqp": _dqp,
    "edram-fpga": _edram,
    "inflash": _inflash,
    "rdxe-vac": _vac,
    "rdxe-dxt": _dxt,
    "rdxe-dxe": _dxe,
}


def covered() -> list[str]:
    """The blocks :func:`vectors` has a generator for."""
    return list(GENERATORS)


def vectors(entry, params: BlockParams, count: int, seed: int, block=None) -> Vectors:
    """Stimulus and expected outputs of ``count`` items for the registry block ``entry`` at
    ``params``, drawn from ``seed`` (the same seed gives the same vectors).

    ``block`` is the component (built from ``params`` when not given; only its payload layouts
    are read). Raises :class:`~memwall.params.ParameterError` for a block without a generator
    or a ``count`` below 1.
    """
    if entry.name not in GENERATORS:
        raise ParameterError(f"no board vectors for block {entry.name}; blocks with vectors are "
                             f"{', '.join(GENERATORS)}")
    if not isinstance(count, int) or count < 1:
        raise ParameterError(f"vector count (--vectors) must be an integer of at least 1, "
                             f"not {count!r}")
    block = entry.board_component(params) if block is None else block
    return GENERATORS[entry.name](params, block, random.Random(seed), count)
