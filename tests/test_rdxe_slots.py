"""The DXE's request slots (hdl/rdxe/dxtside.py, hdl/rdxe/dxe.py; docs/rdxe.md 16.2) in
Amaranth's simulator: a DXE of two layers serving two resident requests, each request's KV cache
of each layer in the DXT's groups from :func:`golden.rdxe.ring.kv_base`, a token count a slot,
and a run's ``slot``, ``restart`` and ``position``; against the ring's golden DXE
(:class:`golden.rdxe.ring.Dxe`: the slots' bases, positions and admissions)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from golden.rdxe.ring import Dxe as RingDxe
from hdl.rdxe.ctrl import Store, loop_cycles
from hdl.rdxe.dxe import Dxe, stride_value
from hdl.rdxe.dxtside import DxtSide
from memwall import registry
from memwall.params import ParameterError
from sim.rdxe.ring import program_cycles
from sim.rdxe.host import row_values
from sim.rdxe.reduced import HEAD_DIM, KV_HEADS, layer_tables
from tests.stream_sim import shared, simulate
from tests.test_rdxe_assemble import variant
from tests.test_rdxe_loop import CFG, DXT as LOOP_DXT, LAYERS, _attention, _caches, _kv_image, \
    _load, looped_layers
from tests.test_rdxe_side import token_images
from tests.test_size import check_size_estimate

SLOTS = 2
#: The loop's DXT with a KV group for each of the two slots' two layers.
DXT = replace(LOOP_DXT, kv_groups=KV_HEADS * LAYERS * SLOTS)

#: The runs: (request, slot, restart at position 0, whether it attends). B and A take their
#: slots and A appends a second token; B's second token attends over B's two tokens only (with
#: A holding two in the other slot's groups); A starts over in its slot (a new request there),
#: overwriting its row 0.
RUNS = [("B", 1, True, False), ("A", 0, True, False), ("A", 0, False, False),
        ("B", 1, False, True), ("A", 0, True, False)]


@pytest.fixture(scope="module")
def stack():
    return looped_layers()


def _parts(asm) -> tuple[int, list]:
    """The first KV append's ``pc`` and the words run from it: the append alone, and the append
    through the O projection (Q quantized, the score factor, the attention, its dequantization,
    the GEMV and its dequantization: test_rdxe_loop.py's ``_attention``)."""
    pc, count, _, _ = _attention(asm)
    return pc, [replace(asm, words=asm.words[pc:pc + n]) for n in (1, count)]


def test_two_requests_keep_their_own_caches(stack):
    """Five runs on a DXE of 2 slots x 2 layers (RUNS), from random K and V codes a run and a
    random rotated Q, against the ring's golden DXE run on the same words in the run's slot (a
    restart is its ``admit``): after the attention and the O projection the TB and rr-SRAM are
    the golden's (each layer's score step, constants and GEMV table); at the
    end the DXT's KV memories hold each slot's each layer's cache at its ``kv_base``; each run's
    cycles are the loop's model at the slot's own context (the slots add none). 2 slots x 2
    layers fill the 4 KV groups of this DXT (the small preset's 4 VACs with 4 groups); a run
    appends in both layers. Each of these breaks it (checked by hand): the slot's KV group base
    dropped, its query head base dropped, one token count for both slots, a restart ignored; and
    the layer loop's six (test_rdxe_loop.py's test_each_layer_attends_over_its_own_groups, which
    runs with --slow since this test runs its words and checks)."""
    asm, stacked = stack
    top = shared(Dxe, CFG, DXT, slots=SLOTS)
    pc, parts = _parts(asm)
    q = _attention(asm)[2]
    rng = np.random.default_rng(7)
    kv_codes = [rng.integers(-4, 5, 2 * HEAD_DIM * KV_HEADS).astype(np.int8) for _ in RUNS]
    rotated = rng.uniform(-2, 2, q[1]).astype(np.float32).view(np.uint32)
    ring = RingDxe(asm, [variant(layer_tables(), l) for l in range(LAYERS)], SLOTS)
    ring.state.tb[q] = rotated
    want, contexts = [], []
    for (_, slot, restart, attends), codes in zip(RUNS, kv_codes):
        if restart:
            ring.admit(slot)
        ring.asm = parts[attends]                # the ring's DXE runs its words: the run's
        ring.state.rr[(0, len(codes))] = codes
        ring.token(slot, {})
        want.append((ring.state.tb.words.astype(np.uint64),
                     ring.state.rr.words.view(np.uint8).astype(np.uint64)))
        contexts.append(ring.positions[slot])
    got, kv = [], np.zeros((DXT.vacs, DXT.kv_rows, DXT.lanes), np.int64)

    async def bench(ctx):
        b = await _load(ctx, top, asm, stacked, _attention(asm)[3], dxt=DXT)
        await b.write_rows(Store.TB, q[0] // DXT.lanes, row_values(rotated, DXT.lanes, 32))
        for (_, slot, restart, attends), codes in zip(RUNS, kv_codes):
            await b.write_rows(Store.RR, 0, row_values(codes.view(np.uint8), DXT.lanes, 8))
            for name, value in (("slot", slot), ("restart", restart), ("position", 0)):
                ctx.set(getattr(top.run.payload, name), value)
            words = len(parts[attends].words)
            stopped, *images = await token_images(b, top, {}, pc, words, read=attends)
            assert stopped == (pc + words, 0)
            got.append(images)
        kv[:] = await _caches(ctx, top)
    simulate(top, bench)
    shapes = {i: g[0].shape for i, g in stacked[0].gemvs.items()}
    view = replace(DXT, kv_groups=KV_HEADS)
    for r, (run, (tb, rr, cycles), (want_tb, want_rr), context) in enumerate(
            zip(RUNS, got, want, contexts)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert have is None or np.array_equal(have, need), \
                f"run {r} {run}: {what} differs at {np.flatnonzero(have != need)}"
        model = loop_cycles(program_cycles(CFG, view, parts[run[3]].words, shapes, context)
                            for _ in stacked)
        assert cycles == model, f"run {r} {run}: {cycles} cycles, the model {model}"
    caches = {g: ([k[None] for k in ring.keys[g]], [v[None] for v in ring.values[g]])
              for g in ring.keys}
    image = _kv_image(caches, DXT)
    assert np.array_equal(kv.astype(np.int8), image), \
        f"KV memories differ at (vac, row, lane) {np.argwhere(kv.astype(np.int8) != image)[:4]}"


@pytest.mark.parametrize("slots", [0, 17])
def test_the_slot_count_is_checked(slots):
    message = f"^Slots must be between 1 and 16, not {slots}$"
    for build in (DxtSide, Dxe):
        with pytest.raises(ValueError, match=message):
            build(CFG, DXT, slots=slots)
    with pytest.raises(ParameterError, match=message):
        registry.get("rdxe-dxe").parameters("small", {"slots": str(slots)})


def test_the_slot_count_is_an_integer():
    with pytest.raises(TypeError, match=r"^Slots must be an integer between 1 and 16, not 2.0$"):
        Dxe(CFG, DXT, slots=2.0)


@pytest.mark.parametrize("slots, message", [
    (2, r"2 slots x 2 layers of 1 KV groups need 4; the DXT's KV groups are 2"),
    (17, r"Slots must be between 1 and 16, not 17"),
])
def test_the_slots_must_fit_the_kv_groups(slots, message):
    """The stride of the loop's DXT (2 KV groups): one slot of its two layers fits, two do not;
    on the DXT of four groups they do."""
    with pytest.raises(ValueError, match=f"^{message}$"):
        stride_value(CFG, LOOP_DXT, 4, 164, 1, slots)
    assert stride_value(CFG, DXT, 4, 164, 1, 2)["kv_groups"] == 1


def test_slots_take_their_restarts_with_the_runs():
    """A DXE of one slot keeps today's ports (``position``, ``restart``, its one-layer ``run``);
    of several, ``run`` carries the slot and the restart and the DXE takes ``stride`` even with
    one layer."""
    one_layer = replace(CFG, layers=1)
    one = Dxe(one_layer, DXT).signature.members
    two = Dxe(one_layer, DXT, slots=2).signature.members
    assert {"position", "restart", "score_scale"} <= set(one) and "stride" not in one
    assert not {"position", "restart"} & set(two) and {"stride", "score_scale"} <= set(two)
    fields = {name for name, _ in two["run"].signature.members["payload"].shape}
    assert fields == {"pc", "count", "slot", "restart", "position"}


#: The small preset with two slots of one layer (a KV group each), as the cocotb case runs it.
_SLOTTED = {"slots": "2", "kv_groups": "2"}


# --slow (about 20 s): the netlist of an off-preset parameter set, as tests/test_size.py's cases.
@pytest.mark.slow
def test_the_size_estimate_holds_for_slots():
    """The estimate's storage (with the token counts) equals the netlist's, its cells are within
    the registry's tolerance."""
    entry = registry.get("rdxe-dxe")
    params = entry.parameters("small", _SLOTTED)
    netlist, _ = entry.rtlil(params)
    check_size_estimate(entry, params, netlist)


def test_the_engine_bench_has_a_bin_for_each_slot_and_restart():
    """The engine testbench's functional coverage with slots (cocotb_tests/rdxe/dxe_tb.py): a
    run in each slot, starting over and going on, and their cross; one slot adds no ``run``
    point. slot_tokens's four runs (slot 0 and slot 1 each start over, then go on) fill them."""
    from cocotb_coverage.coverage import coverage_db

    from cocotb_tests.rdxe.dxe_tb import _samplers
    assert set(_samplers("slots-test-one", 1)) == {"ext", "done"}
    sample = _samplers("slots-test", 2)["run"]
    cross = coverage_db["slots-test.run_slot_restart"]
    for n, (slot, restart) in enumerate(((0, 1), (1, 1), (1, 0), (0, 0))):
        assert cross.coverage == n
        sample({"slot": slot, "restart": restart, "position": 0, "pc": 0, "count": 1})
    assert (cross.coverage, cross.size) == (4, 4)
    assert coverage_db["slots-test.run_slot"].coverage == 2
