"""memwall/board/vectors.py and memwall/board/run.py: golden vectors, the host program's
comparison, and ``memwall board run``'s refusals (the simulated board runs in
cocotb_tests/test_board.py).

* Vectors: each generator's stimulus decoded field by field and given to the golden model
  again, item by item, must give its expected items; the same seed gives the same vectors and
  another seed others; the requantizer's and the dot product's items checked against answers
  worked out by hand from their layouts.
* :func:`memwall.board.run.check` on a capture with a wrong and a missing item: both counted,
  named with stream, index, expected and got; cycles per item from the stamps.
* The command: an unknown block or board, a block without vectors, a missing serial port, a
  missing or failing openFPGALoader, a missing bitstream, more vectors than the board's
  memories: one line, exit status 2, nothing run. A board whose port echoes (pyserial's
  ``loop://``) fails the run in one line, exit status 1.
"""

import enum
import json
import os
import stat
from dataclasses import replace

import numpy as np
import pytest

from golden import flowkv as flowkv_golden
from golden import flowkv_dqp as dqp_golden
from golden import inflash as inflash_golden
from golden import rdxe as rdxe_golden
from golden import umdam as umdam_golden
from golden.arith import float as float_golden
from golden.arith import func as func_golden
from golden.arith import idot as idot_golden
from golden.arith import requant as requant_golden
from hdl.arith.format import BF16, FP32, float_format
from hdl.board import Harness, Status
from hdl.edram import Op
from hdl.flowkv import FlowKVConfig
from hdl.inflash.spec import Mode
from golden.rdxe import program as P
from hdl.rdxe import DESTS, OPS
from hdl.rdxe.ctrl import Store
from hdl.rdxe.hosted import HostItem
from memwall import cli, registry
from memwall.board.host import Capture, Record
from memwall.board.run import HarnessSettings, Mismatch, Report, check, sim_settings
from memwall.board.vectors import Vectors, covered, pack, vectors
from memwall.params import ParameterError
from sim.rdxe.host import board_layer, board_ports, row_elements

from .test_board_harness import small

SEED = 23


def decoded(block, stream, items):
    layout = getattr(block, stream).payload.shape()
    return [layout.from_bits(item) for item in items]


def _int(value):
    return value.value if isinstance(value, enum.Enum) else int(value)


def again(name, params, block, v):
    """The expected items, recomputed from the decoded stimulus one item at a time."""
    if name == "umdam":
        out = []
        for item in decoded(block, "i", v.stimulus["i"]):
            fields = umdam_golden.mapper_outputs(params.address_mappings, [int(item["addr"])],
                                                 [int(item["mapping"])])
            out.append({k: int(fields[k][0]) for k, _ in block.o.payload.shape()})
        return [pack(block.o.payload.shape(), o) for o in out]
    if name == "umdam-composer":
        # The composer inverts the mapper: the mapper's coordinates of each address.
        out = []
        for item, o in zip(decoded(block, "i", v.stimulus["i"]),
                           decoded(block, "o", v.expected["o"])):
            select = int(item["mapping"])
            if select >= len(params.address_mappings):
                out.append({"addr": 0, "error": 1})
                continue
            back = umdam_golden.mapper_outputs(params.address_mappings, [int(o["addr"])],
                                               [select])
            assert all(int(back[k][0]) == int(item[k]) for k, _ in block.i.payload.shape()
                       if k != "mapping"), item
            out.append({"addr": int(o["addr"]), "error": 0})
        return [pack(block.o.payload.shape(), o) for o in out]
    if name == "umdam-tilegen":
        beats = []
        for item in decoded(block, "cmd", v.stimulus["cmd"]):
            beats += umdam_golden.generator_beats(
                params.address_mapping, params.elem_bytes, params.max_rows, params.max_cols,
                int(item["rows"]), int(item["cols"]), int(item["base_tile"]),
                ("npu", "pim")[_int(item["order"])])
        return [pack(block.o.payload.shape(), b) for b in beats]
    if name in OTHERS:
        return OTHERS[name](params, block, v)
    layout_o = block.o.payload.shape()
    items = decoded(block, "i", v.stimulus["i"])
    if name == "arith-requant":
        ys = [requant_golden.reference(int(i["x"]), int(i["m"]), int(i["shift"]),
                                       out_bits=params.out_bits, clamp=params.clamp)
              for i in items]
    elif name == "arith-idot":
        ys = idot_golden.dot_reference([[int(a) for a in i["a"]] for i in items],
                                       [[int(b) for b in i["b"]] for i in items])
    elif name == "arith-fpmul":
        fmts = [float_format(f) for f in (params.a_fmt, params.b_fmt, params.out_fmt)]
        ys = [int(float_golden.fmul([int(i["a"])], [int(i["b"])], *fmts)[0]) for i in items]
    elif name == "arith-fpadd":
        fmt = float_format(params.fmt)
        ys = [int(float_golden.fadd([int(i["a"])], [int(i["b"])], fmt)[0]) for i in items]
    elif name == "arith-fpmac":
        fmt, acc = float_format(params.in_fmt), float_format(params.acc_fmt)
        ys = [float_golden.fmac([int(i["a"])], [int(i["b"])], [int(i["c"])], fmt, acc)[0]
              for i in items]
    elif name == "arith-fdot":
        fmt, acc = float_format(params.in_fmt), float_format(params.acc_fmt)
        ys = [float_golden.fdot(np.array([[int(a) for a in i["a"]]]),
                                np.array([[int(b) for b in i["b"]]]), fmt, acc)[0]
              for i in items]
    elif name == "arith-fpconv":
        fmt, out = float_format(params.in_fmt), float_format(params.out_fmt)
        ys = [float_golden.fconvert([int(i["x"])], fmt, out)[0] for i in items]
    elif name == "arith-int2fp":
        ys = [float_golden.int_to_float([int(i["x"])], params.int_bits,
                                        float_format(params.fmt))[0] for i in items]
    elif name in FUNCTIONS:
        function, argument = FUNCTIONS[name]
        ys = [getattr(func_golden, function)(np.array([int(i["x"])], np.uint32),
                                             getattr(params, argument))[0] for i in items]
    else:
        raise AssertionError(f"no check for {name}")
    return [pack(layout_o, {"y": int(y)}) for y in ys]


FUNCTIONS = {"arith-exp2": ("exp2", "table_bits"), "arith-recip": ("reciprocal", "iterations"),
             "arith-rsqrt": ("rsqrt", "iterations")}


def flowkv_again(params, block, v):
    """Each step's q, K and V rows rebuilt from the beats, pair by pair; the rows a step does
    not stream are NaN (K) and infinity (V), so that the golden model using one would show."""
    cfg = FlowKVConfig(**params.pair_args())
    pairs = getattr(params, "pairs", None)
    suffixes = [""] if pairs is None else [str(n) for n in range(pairs)]
    out = []
    for n in suffixes:
        beats = {kind: iter(decoded(block, kind + n, v.stimulus[kind + n])) for kind in "qkv"}

        def rows(kind, count):
            return np.array([[int(x) for _ in range(cfg.beats) for x in next(beats[kind])["data"]]
                             for _ in range(count)], np.uint16).reshape(count, cfg.head_dim)

        for cmd in decoded(block, "cmd", v.stimulus["cmd"]):
            length, position = int(cmd["length"]), int(cmd["position"])
            window = int(cmd["window"]) if cmd["sliding"] else None
            index, _ = flowkv_golden.sweep(length, position, chunk=cfg.chunk, window=window)
            streamed = [r for r in range(length) if r // cfg.chunk in index.tolist()]
            q = rows("q", cfg.group)
            K = np.full((length, cfg.head_dim), 0x7FC0, np.uint16)
            V = np.full((length, cfg.head_dim), 0x7F80, np.uint16)
            K[streamed], V[streamed] = rows("k", len(streamed)), rows("v", len(streamed))
            O = flowkv_golden.attend(q, K, V, position, chunk=cfg.chunk, lanes=cfg.lanes,
                                     window=window, out_fmt=cfg.out_fmt)
            out += [{"data": [int(x) for x in O[h, b * cfg.lanes:(b + 1) * cfg.lanes]],
                     "head": h, "beat": b, "error": 0,
                     "last": int(h == cfg.group - 1 and b == cfg.beats - 1)}
                    for h in range(cfg.group) for b in range(cfg.beats)]
        assert all(next(it, None) is None for it in beats.values())
    layout = getattr(block, "o" + suffixes[0]).payload.shape()
    return [pack(layout, o) for o in out]


def edram_again(params, block, v):
    """A dictionary of the words written; a read answers the stored word, live."""
    stored, out = {}, []
    for req in decoded(block, "req", v.stimulus["req"]):
        if req["op"] == Op.WRITE:
            stored[int(req["addr"])] = int(req["data"])
        else:
            assert req["op"] == Op.READ
            out.append({"data": stored[int(req["addr"])], "live": 1, "error": 0})
    return [pack(block.resp.payload.shape(), o) for o in out]


def inflash_again(params, block, v):
    """Each GEMV's weights read back from the flash's words (a read ends at a word marked
    last; its bytes cut to the stream's length), its x from the beats: the page reads the
    command names and the rows' results."""
    F, P = params.fmacs, params.page_bytes
    x_beats = iter(decoded(block, "x", v.stimulus["x"]))
    words = iter(decoded(block, "rd_data", v.stimulus["rd_data"]))
    reads, out = [], []
    for cmd in decoded(block, "cmd", v.stimulus["cmd"]):
        mode, rows, cols = Mode(_int(cmd["mode"])).name.lower(), int(cmd["rows"]), int(cmd["cols"])
        size = inflash_golden.stream_bytes(mode, rows, cols)
        x = [int(lane) for _ in range(-(-cols // F)) for lane in next(x_beats)["data"]][:cols]
        stream = bytearray()
        for k in range(-(-size // P)):
            nbytes = min(P, size - k * P)
            reads.append({"page": int(cmd["page"]) + k, "column": 0, "bytes": nbytes,
                          "run": nbytes, "stride": nbytes})
            data = bytearray()
            while True:
                word = next(words)
                data += bytes(int(b) for b in word["data"])
                if word["last"]:
                    break
            stream += data[:nbytes]
        w = inflash_golden.Weights(mode, np.frombuffer(bytes(stream), "<u2").reshape(rows, cols))
        y = inflash_golden.gemv(w, np.array(x, np.int64))
        out += [{"value": int(value) & 0xFFFFFFFF, "error": 0, "last": int(r == rows - 1)}
                for r, value in enumerate(y)]
    assert next(words, None) is None and next(x_beats, None) is None
    return [pack(block.rd_cmd.payload.shape(), r) for r in reads] + \
        [pack(block.y.payload.shape(), o) for o in out]


def vac_again(params, block, v):
    """The setup replayed into a WMEM, a KV cache (byte enables) and a PPU table, all zero at
    first; each output's chunks then meet the rows they name, its accumulator is the plain sum
    of products, fused outputs take the RC factors in order (the one with ``rc_last`` the last
    to use each): every chunk forwarded, then the results."""
    L = params.lanes
    memories = {"wmem": {}, "kv": {}}
    for name in memories:
        for item in decoded(block, name, v.setup[name]):
            row = memories[name].setdefault(int(item["addr"]), [0] * L)
            for k in range(L):
                if name == "wmem" or int(item["en"]) >> k & 1:
                    row[k] = int(item["data"][k])
    table = {int(e["addr"]): (int(e["m"]), int(e["shift"]))
             for e in decoded(block, "ppu", v.setup["ppu"])}
    factors = iter(decoded(block, "rc", v.stimulus["rc"]))
    factor, out, w, x = None, [], [], []
    for chunk in decoded(block, "hlink_i", v.stimulus["hlink_i"]):
        if chunk["first"]:
            w, x = [], []
        w += memories["kv" if chunk["kv"] else "wmem"].get(int(chunk["row"]), [0] * L)
        x += [int(a) for a in chunk["data"]]
        if not chunk["last"]:
            continue
        acc = int(np.dot(np.array(w, np.int64), np.array(x, np.int64)))
        if chunk["rcu"]:
            if factor is None:
                item = next(factors)
                factor = rdxe_golden.RCFactor(np.array(int(item["m"])),
                                              np.array(int(item["shift"])))
            acc = int(rdxe_golden.rcu(np.array([acc]), factor)[0])
            if chunk["rc_last"]:
                factor = None
        m, shift = table[int(chunk["out"])]
        out.append(int(rdxe_golden.ppu(np.array([acc]), np.array([m]), np.array([shift]),
                                       params)[0]))
    assert next(factors, None) is None and factor is None
    return v.stimulus["hlink_i"] + [pack(block.o.payload.shape(), {"y": y}) for y in out]


def dxt_again(params, block, v):
    """The setup replayed into each VAC's WMEM and PPU table; each GEMV's weights read back as
    the tile reads them (output ``o`` from VAC ``o mod N``, rows ``row + p C ..``, entry
    ``entry + p``), its activations from its chunks, zero-padded as sent; a GEMV to a key or a
    value stored under its group and token; Q.K^T of the keys stored, scaled by VAC 0's entry,
    and P.V of those scores against the values stored, channel ``e`` scaled by VAC ``e mod N``'s
    entry ``entry + e // N``: the results four to a word, a response per command."""
    N, L, d = params.vacs, params.lanes, params.head_dim
    wmem = np.zeros((N, params.wmem_depth, L), np.int64)
    table = np.zeros((N, params.ppu_depth, 2), np.int64)
    for item in decoded(block, "wmem", v.setup["wmem"]):
        wmem[int(item["vac"]), int(item["addr"])] = [int(b) for b in item["data"]]
    for item in decoded(block, "ppu", v.setup["ppu"]):
        table[int(item["vac"]), int(item["addr"])] = (int(item["m"]), int(item["shift"]))
    chunks = iter(decoded(block, "x", v.stimulus["x"]))
    cache, scores, words, layout = {}, None, [], block.o.payload.shape()
    for c in decoded(block, "cmd", v.stimulus["cmd"]):
        op, dest, head, T = OPS[int(c["op"])], DESTS[int(c["dest"])], int(c["head"]), \
            int(c["tokens"])
        M, C, row, entry = (int(c[k]) for k in ("outputs", "chunks", "row", "entry"))
        C = d // L if op == "qk" else 0 if op == "pv" else C
        x = np.array([int(a) for _ in range(C) for a in next(chunks)["data"]], np.int64)
        if op == "qk":
            K = np.array([cache["key", head // params.group_size, t] for t in range(T)])
            _, y = rdxe_golden.qk_scores(x, K, *table[0, entry], params)
            scores = y
        elif op == "pv":
            V = np.array([cache["value", head // params.group_size, t] for t in range(T)])
            m, shift = table[np.arange(d) % N, entry + np.arange(d) // N].T
            y = rdxe_golden.softmax_pv(scores, V, np.uint32(int(c["scale"])), m, shift, params,
                                       mode=("fused", "sequential")[int(c["seq"])])
        else:
            W = np.array([wmem[o % N, row + o // N * C:row + o // N * C + C].ravel()
                          for o in range(M)])
            m, shift = table[np.arange(M) % N, entry + np.arange(M) // N].T
            if op == "gemv":
                y = rdxe_golden.gemv(W, x, m, shift, params)
            else:
                y = rdxe_golden.rmsnorm_gemv(W, x, m, shift, np.uint32(int(c["eps"])), params,
                                             mode=("fused", "sequential")[int(c["seq"])],
                                             inv_k=np.uint32(int(c["inv_k"])))
            if dest != "out":
                cache[dest, head, T] = y
                continue
        words += [pack(layout, {"data": [int(b) for b in y[w:w + 4]], "keep": 0xF,
                                "last": int(w + 4 == len(y))}) for w in range(0, len(y), 4)]
    assert next(chunks, None) is None
    resp = pack(block.resp.payload.shape(), {"error": 0})
    return words + [resp] * len(v.stimulus["cmd"])


def dqp_again(params, block, v):
    """Each command's Q4NX records rebuilt from the ``q`` bytes and its activation per tile from
    the ``a`` beats; a dequantization's weights record by record, a GEMV's results tile by
    tile (:func:`golden.flowkv_dqp.gemm` of the tile's dequantized rows)."""
    cfg = params.config()
    size, lanes, m = cfg.beat_bits // 8, cfg.lanes, cfg.tile
    raw = b"".join(int(b["data"]).to_bytes(size, "little")
                   for b in decoded(block, "q", v.stimulus["q"]))
    records = iter(np.frombuffer(raw, np.uint8).reshape(-1, dqp_golden.RECORD_BYTES))
    inputs = iter(int(x) for b in decoded(block, "a", v.stimulus["a"]) for x in b["data"])
    y_out, w_out = [], []
    for cmd in decoded(block, "cmd", v.stimulus["cmd"]):
        groups, tiles = int(cmd["groups"]) + 1, int(cmd["tiles"]) + 1
        K = groups * dqp_golden.GROUP
        if cmd["dequant"]:
            count = tiles * groups * m
            for n in range(count):
                w = dqp_golden.dequantize(dqp_golden.q4nx_from_records(next(records), 1, 32, 1))
                w_out += [{"data": [int(x) for x in w[0, b:b + lanes]],
                           "last": int(n == count - 1 and b + lanes == 32)}
                          for b in range(0, 32, lanes)]
            continue
        for t in range(tiles):
            part = np.stack([next(records) for _ in range(groups * m)])
            W = dqp_golden.dequantize(dqp_golden.q4nx_from_records(part, m, K, m))
            a = np.array([next(inputs) for _ in range(K)], np.uint16)
            y = dqp_golden.gemm(W, a[None])[0]
            if cmd["bf16"]:
                y = float_golden.fconvert(y, FP32, BF16)
            y_out += [{"data": int(x), "last": int(t == tiles - 1 and r == m - 1)}
                      for r, x in enumerate(y)]
    assert next(records, None) is None and next(inputs, None) is None
    return ([pack(block.y.payload.shape(), o) for o in y_out]
            + [pack(block.w.payload.shape(), o) for o in w_out])


OTHERS = {"flowkv": flowkv_again, "flowkv-array": flowkv_again, "edram-fpga": edram_again,
          "inflash": inflash_again, "rdxe-vac": vac_again, "rdxe-dxt": dxt_again,
          "flowkv-dqp": dqp_again}


@pytest.mark.parametrize("name", [n for n in covered() if n != "rdxe-dxe"])
def test_vectors_follow_the_golden_model(name):
    """(rdxe-dxe, whose vectors are tokens of a layer: test_dxe_vectors_follow_the_program.)"""
    entry, params, block = small(name)
    v = vectors(entry, params, 16, SEED, block)
    commands = next(iter(v.stimulus.values()))
    # The VAC's sixteen GEMVs are several chunks each, half of them fused (a factor each).
    assert len(commands) == 16 if name != "rdxe-vac" else \
        len(commands) >= 16 and 0 < len(v.stimulus["rc"]) < 16
    expected = [item for items in v.expected.values() for item in items]
    assert expected == again(name, params, block, v)
    assert vectors(entry, params, 16, SEED, block) == v
    assert vectors(entry, params, 16, SEED + 1, block) != v


def _tb_words(mirror: dict, first: int, count: int, lanes: int) -> np.ndarray:
    """``count`` fp32 words of the TB from word ``first``, from a mirror of its rows."""
    words = [w for r in range(first // lanes, -(-(first + count) // lanes))
             for w in row_elements(mirror.get(r, 0), lanes, 32)]
    return np.array(words[first % lanes:first % lanes + count], np.uint32)


def test_dxe_vectors_follow_the_program():
    """rdxe-dxe's vectors, 2 tokens, replayed against the layer's named program
    (``golden.rdxe.program.run`` on named buffers; the generator's model runs the assembled
    words on flat memories): the program and constants read back as the setup wrote them; per
    token, a run of every word from 0 ending there without error, and the TB rows read after
    it holding the named program's residual at the output's address, the second token's
    attending over both (it differs from its run alone). Every read answered in order."""
    entry = registry.get("rdxe-dxe")
    params = entry.parameters("small")
    block = entry.board_component(params)
    v = vectors(entry, params, 2, SEED, block)
    board, L = board_layer(params), params.lanes
    host, answers = block.host.payload.shape(), iter(decoded(block, "ext_data",
                                                             v.expected["ext_data"]))
    mirror, after = {s: {} for s in Store}, []
    named, residuals, alone = P.DxeState(), [], []
    for phase in ("setup", "stimulus"):
        for item in (host.from_bits(b) for b in getattr(v, phase)["host"]):
            if item.kind == HostItem.RUN:
                assert (int(item.run.pc), int(item.run.count)) == (0, len(board.asm.words))
                inputs = {name: _tb_words(mirror[Store.TB], at, board.layer.inputs[name], L)
                          for name, at in board.asm.inputs.items()}
                named.tb.update({k: x.copy() for k, x in inputs.items()})
                residuals.append(P.run(board.layer.program, named,
                                       board.layer.tables).tb["h"].copy())
                alone.append(P.run(board.layer.program, P.DxeState(tb=inputs),
                                   board.layer.tables).tb["h"])
                after.append({})
                continue
            store, row = Store(_int(item.ext.store)), int(item.ext.row)
            if item.ext.write:
                assert int(item.ext.mask) == (1 << L) - 1
                mirror[store][row] = int(item.ext.data)
                continue
            got = int(next(answers)["data"])
            if store in (Store.PROG, Store.CONST):
                assert got == mirror[store][row], (store, row)
            elif store == Store.TB and after:
                after[-1][row] = got             # the TB as the run left it
    assert next(answers, None) is None and len(residuals) == 2
    assert len(mirror[Store.PROG]) == len(board.asm.words)
    for t, h in enumerate(residuals):
        got = _tb_words(after[t], board.asm.outputs["h"], len(h), L)
        assert np.array_equal(got, h), f"token {t}: residual {got} against {h}"
    assert not np.array_equal(residuals[1], alone[1]), "the second token attends over the first"
    assert v.expected["done"] == [pack(block.done.payload.shape(),
                                       {"pc": len(board.asm.words), "error": 0})] * 2
    first = vectors(entry, params, 1, SEED, block)
    assert first.setup == v.setup and first.stimulus["host"] == v.stimulus["host"][
        :len(first.stimulus["host"])]
    assert vectors(entry, params, 1, SEED + 1, block).stimulus != first.stimulus


def test_board_ports_are_the_board_layers_without_its_loads():
    """The rdxe-dxe board form's plain inputs, from the tables' shapes, equal the ones the
    board layer's loads give (the board vectors' and the board form's agree)."""
    params = registry.get("rdxe-dxe").parameters("small")
    assert board_ports(params) == board_layer(params).ports
    with pytest.raises(ValueError, match="one layer and one slot"):
        board_ports(replace(params, slots=2))


def test_dxe_vector_count_is_tokens_up_to_the_cache():
    entry = registry.get("rdxe-dxe")
    params = entry.parameters("small")
    with pytest.raises(ParameterError) as info:
        vectors(entry, params, 65, SEED)
    assert str(info.value) == "rdxe-dxe vector count (--vectors) is tokens of the reduced " \
                              "layer, 1 to 64 (its KV cache's capacity), not 65"


def test_vectors_by_hand():
    """Items worked out from the layouts and the contracts, not from the generators."""
    entry, params, block = small("arith-requant")
    # x = -300, m = 1000, shift 10: -300000 / 1024 = -292.97 -> clamped to -127 (symmetric).
    layout = block.i.payload.shape()
    item = (-300 & 0xFFFF) | (1000 << 16) | (10 << 32)
    assert pack(layout, {"x": -300, "m": 1000, "shift": 10}) == item
    assert int(requant_golden.requantize([-300], [1000], [10], out_bits=8,
                                         clamp="symmetric")[0]) == -127
    entry, params, block = small("arith-idot")
    # Four int8 lanes then four int4 lanes: a = (1, -1, 2, -128), b = (3, 3, -8, 1) ->
    # 3 - 3 - 16 - 128 = -144.
    layout = block.i.payload.shape()
    bits = pack(layout, {"a": [1, -1, 2, -128], "b": [3, 3, -8, 1]})
    assert bits == 0x1 | 0xFF << 8 | 0x2 << 16 | 0x80 << 24 | (0x3 | 0x3 << 4 | 0x8 << 8 |
                                                                0x1 << 12) << 32
    assert int(idot_golden.dot(np.array([1, -1, 2, -128]), np.array([3, 3, -8, 1]))) == -144


class _Host:
    """A host whose board captured ``items`` and ``cycles`` (``check`` needs ``execute``); with
    ``setup``, the items of a run before (its cycles 20)."""

    def __init__(self, harness, items, cycles, end=Status.OK, setup=None):
        self.harness, self.items, self.cycles, self.end = harness, items, cycles, end
        self.setup, self.calls = setup, []

    @property
    def sent(self):
        return self.calls[-1]

    def execute(self, stimulus, expect, limit):
        self.calls.append((stimulus, expect, limit))
        items, cycles, run = self.items, self.cycles, 50
        if self.setup is not None and len(self.calls) == 1:
            items, cycles, run = self.setup, {s: list(range(len(x))) for s, x in
                                              self.setup.items()}, 20
        captured = {s: len(x) for s, x in items.items()}
        return Capture(items, cycles, Record(run, self.end, {"i": 4}, captured, 0, 0, 0))


def test_check_names_mismatches_and_measures():
    entry, params, block = small("umdam")
    v = vectors(entry, params, 4, SEED, block)
    harness = Harness(block, stimulus_depth=4, capture_depth=4)
    want = v.expected["o"]
    host = _Host(harness, {"o": [want[0], want[1] ^ 2, want[2]]}, {"o": [2, 4, 8]})
    report = check(host, v, name="umdam", limit=99)
    assert host.sent == (v.stimulus, {"o": 4}, 99)
    assert not report.passed and report.mismatches == 2
    assert report.first == [Mismatch("o", 1, want[1], want[1] ^ 2), Mismatch("o", 3, want[3], None)]
    assert report.cycles_per_item == {"o": 3.0}
    assert report.lines()[-2:] == [
        f"  mismatch o[1]: expected 0x{want[1]:x}, got 0x{want[1] ^ 2:x}",
        f"  mismatch o[3]: expected 0x{want[3]:x}, got nothing"]
    assert Report.from_json(report.to_json()) == report
    assert report.lines(clock_mhz=50)[0].endswith("run ended OK after 50 cycles (1.00 us at "
                                                  "50 MHz)")
    assert report.lines(clock_mhz=50)[1] == "  o: 3 of 4 captured, 3.000 cycles per item, " \
                                            "60.00 ns per item"
    good = check(_Host(harness, {"o": want}, {"o": [2, 3, 4, 5]}), v, name="umdam")
    assert good.passed and good.cycles_per_item == {"o": 1.0}
    late = check(_Host(harness, {"o": want}, {"o": [2, 3, 4, 5]}, Status.RUN_LIMIT), v,
                 name="umdam")
    assert not late.passed and late.mismatches == 0


def test_check_runs_the_setup_first():
    """Setup vectors are played by a run before the measured one, which expects no output;
    the report says how it ended and fails when it gave any."""
    entry, params, block = small("umdam")
    v = vectors(entry, params, 4, SEED, block)
    v = Vectors(v.stimulus, v.expected, {"i": list(range(40))})
    harness = Harness(block, stimulus_depth=64, capture_depth=4)
    host = _Host(harness, {"o": v.expected["o"]}, {"o": [2, 3, 4, 5]}, setup={})
    report = check(host, v, name="umdam", limit=99)
    assert host.calls == [(v.setup, {}, 99), (v.stimulus, {"o": 4}, 99)]
    assert report.passed and (report.setup, report.setup_cycles) == ("OK", 20)
    assert report.run_cycles == 50 and report.cycles_per_item == {"o": 1.0}
    assert report.lines()[-1] == "  setup run (loads into the block's memories): ended OK " \
                                 "after 20 cycles"
    assert Report.from_json(report.to_json()) == report
    noisy = check(_Host(harness, {"o": v.expected["o"]}, {"o": [2, 3, 4, 5]},
                        setup={"o": [7]}), v, name="umdam")
    assert not noisy.passed and noisy.mismatches == 0 and noisy.setup == "OK with 1 output(s)"
    # The simulated board's stimulus memories are as deep as the setup's longest stream.
    assert sim_settings(v).stimulus_depth == 64 and sim_settings(v).capture_depth == 4
    assert check(_Host(harness, {"o": v.expected["o"]}, {"o": [2, 3, 4, 5]}), Vectors(
        v.stimulus, v.expected), name="umdam").lines()[-1].startswith("  o: 4 of 4")


def _fake_loader(folder, status, text=""):
    """An ``openFPGALoader`` on PATH that prints ``text`` and exits with ``status``."""
    path = folder / "openFPGALoader"
    path.write_text(f"#!/bin/sh\necho '{text}' >&2\nexit {status}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(folder)


@pytest.fixture
def build(tmp_path):
    """A `memwall board build` output folder: a bitstream and board.json."""
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "top.bit").write_bytes(b"\0")
    (folder / "board.json").write_text(json.dumps({"board": "ulx3s-85f", "clock_mhz": 48.5,
                                                   "harness": {"stimulus_depth": 32,
                                                               "capture_depth": 32,
                                                               "max_length": 255,
                                                               "baud": 115200}}))
    return folder


def run_cli(capsys, *argv):
    status = cli.main(["board", "run", *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("argv, message", [
    (["nope", "--sim"], "memwall: error: unknown block 'nope'; blocks are arith-fpmul"),
    (["edram", "--sim"], "memwall: error: no board vectors for block edram; `memwall board "
                         "run` takes umdam"),
    (["umdam"], "memwall: error: memwall board run needs --board and --port, or --sim"),
    (["umdam", "--board", "de10", "--port", "/dev/null"],
     "memwall: error: unknown board 'de10'; boards are ulx3s-85f, ulx3s-25f, icebreaker, ecpix5-85"),
    (["umdam", "--board", "ulx3s-85f", "--port", "/dev/ttyNOPE9"],
     "memwall: error: serial port /dev/ttyNOPE9 does not exist (is the board plugged in?)"),
    (["umdam", "--sim", "--vectors", "0"], "memwall: error: --vectors must be at least 1, not 0"),
    (["umdam", "--sim", "--set", "banks=3"], "memwall: error: "),
    (["umdam", "--sim", "--vectors", "40000"], "memwall: error: 40000 items on one stream "
                                              "exceed the harness's largest memory of 32768"),
])
def test_run_refuses_bad_input_in_one_line(capsys, argv, message):
    status, out, err = run_cli(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err


def test_run_without_openfpgaloader(capsys, monkeypatch, tmp_path, build):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    status, out, err = run_cli(capsys, "umdam", "--board", "ulx3s-85f", "--port", "/dev/null",
                               "--bitstream", str(build))
    assert status == 2 and out == ""
    assert err == ("memwall: error: openFPGALoader not found on PATH (Debian: apt install "
                   "openfpgaloader); or check the block without a board: memwall board run "
                   "--sim\n")


def test_run_with_a_failing_openfpgaloader_or_no_bitstream(capsys, monkeypatch, tmp_path, build):
    tools = tmp_path / "tools"
    tools.mkdir()
    monkeypatch.setenv("PATH", _fake_loader(tools, 1, "unable to open ftdi device: -3"))
    status, _, err = run_cli(capsys, "umdam", "--board", "icebreaker", "--port", "loop://",
                             "--bitstream", str(build), "--vectors", "4")
    assert (status, err) == (2, "memwall: error: openFPGALoader could not program the "
                                "icebreaker (is it connected?): unable to open ftdi device: -3\n")
    status, _, err = run_cli(capsys, "umdam", "--board", "icebreaker", "--port", "loop://",
                             "--bitstream", str(tmp_path / "none"))
    assert status == 2 and err.startswith(f"memwall: error: --bitstream {tmp_path / 'none'}: "
                                          f"no bitstream")
    status, _, err = run_cli(capsys, "umdam", "--board", "icebreaker", "--port", "loop://",
                             "--bitstream", str(build), "--vectors", "33")
    assert (status, err) == (2, "memwall: error: 33 items of i exceed the board's stimulus "
                                "memory of 32; ask for fewer --vectors\n")


def test_board_record_gives_the_harness_and_the_clock(build):
    assert HarnessSettings.from_build(build) == HarnessSettings(32, 32, 255, 115200, 48.5)
    assert HarnessSettings.from_build(build.parent) == HarnessSettings()


def test_run_with_a_broken_board_record(capsys, monkeypatch, tmp_path, build):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    (build / "board.json").write_text('{"harness": {"capture_depth": "deep"}}')
    status, out, err = run_cli(capsys, "umdam", "--board", "ulx3s-85f", "--port", "/dev/null",
                               "--bitstream", str(build), "--no-program")
    assert status == 2 and out == ""
    assert err.startswith(f"memwall: error: {build / 'board.json'} is not a board record of "
                          f"`memwall board build` (invalid literal") and err.count("\n") == 1
    (build / "board.json").write_text('{"stimulus_depth": 0}')
    status, out, err = run_cli(capsys, "umdam", "--board", "ulx3s-85f", "--port", "/dev/null",
                               "--bitstream", str(build), "--no-program")
    assert (status, out) == (2, "")
    assert err == (f"memwall: error: the board record in {build}: Harness stimulus memory depth "
                   f"(stimulus_depth, items) must be between 1 and 32768, not 0\n")


def test_run_on_a_port_that_echoes_fails_in_one_line(capsys, monkeypatch, tmp_path, build):
    """pyserial's ``loop://`` returns the host's own frames: a WRITE's command byte (1) reads
    as the status BAD_CRC."""
    tools = tmp_path / "tools"
    tools.mkdir()
    monkeypatch.setenv("PATH", _fake_loader(tools, 0) + os.pathsep + os.environ["PATH"])
    status, out, err = run_cli(capsys, "umdam", "--board", "ulx3s-85f", "--port", "loop://",
                               "--bitstream", str(build), "--vectors", "4")
    assert status == 1 and out == ""
    assert err == "memwall: the board on loop:// failed the run: WRITE answered BAD_CRC\n"
