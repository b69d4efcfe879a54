"""The ring of DXEs: its golden (golden/rdxe/ring.py) and its cycle model on the RTL's costs
(sim/rdxe/ring.py, ``schedule``), on the reduced Llama layer (sim/rdxe/reduced.py): 2 DXEs of 2
layers, 3 requests of different prompt and generation lengths, 2 slots (docs/rdxe.md, 16)."""

from __future__ import annotations

import numpy as np
import pytest

from golden.rdxe import assemble as A
from golden.rdxe import program as P
from golden.rdxe import ring as R
from hdl.rdxe.ctrl import CtrlConfig
from hdl.rdxe.isa import ProgramSpace
from hdl.rdxe.spec import DxtConfig
from sim.rdxe.ring import Request, program_cycles, rtl_costs, schedule
from sim.rdxe.reduced import HEAD_DIM, HEADS, INPUTS, KV_HEADS, Host, layer_tables, tokens
from tests.test_rdxe_assemble import variant

LANES, LAYERS, STAGES, SLOTS = 4, 4, 2, 2
#: The DXE of tests/test_rdxe_side.py, whose RTL runs the reduced layer in 1,860 cycles a token
#: (1,638 before session 25's issue register added a cycle to each of its 28 vector and scalar
#: ops and its cuts a cycle or more to the GPPU, quantizer and activation, docs/rdxe.md 14.2;
#: 1,726 before session 26's request register added one to each of its 8 chunked DXT commands
#: and the activation's argument multiplier a cycle to its 2 activation ops, 14.4; 1,736
#: before session 27's command register added one to each of its 2 P.V commands; 1,738 before
#: session 29's command register in the DXT added one to each of its 2 P.V commands; its 8
#: chunked commands' reads hide it; 1,740 before session 31's landed reciprocal added 8 to
#: each of its 8 scalar ops and 2 activation ops; 1,820 before session 34's chunk skid buffer
#: added one to each of its 8 chunked DXT commands; 1,828 before session 36's landed fp32
#: pieces added a cycle to each multiplier of the controller's GPPU, quantizer and activation;
#: 1,860 before session 39's operand registers in the VACs' blocks added a cycle to every
#: command's path through the PPU and another to a fused one's through the RCU).
TOKEN = 1874
SPACE = ProgramSpace(tb_words=128, rr_bytes=192, registers=4, const_words=192, gemvs=5,
                     align=LANES)
CTRL = CtrlConfig(SPACE, lanes=LANES, head_dim=HEAD_DIM, program_words=64)
DXT = DxtConfig(lanes=LANES, vacs=4, head_dim=HEAD_DIM, group_size=2, kv_groups=1,
                wmem_depth=256, ppu_depth=64, kv_rows=64, max_inputs=64)
#: (prompt, generated) tokens of the three requests; the second finishes first and the third
#: takes its slot.
LENGTHS = ((2, 3), (1, 2), (3, 1))
#: A link moves the token's TB inputs (the residual, cos, sin) a row a cycle.
LINK = sum(INPUTS.values()) // LANES


@pytest.fixture(scope="module")
def ring():
    base = layer_tables()
    layers = [variant(base, l) for l in range(LAYERS)]
    asm = A.assemble(P.llama_layer(HEADS, KV_HEADS, HEAD_DIM), base, INPUTS, ["h"], SPACE,
                     HEAD_DIM, in_place=("h",), keep=("cos", "sin"))
    shapes = {i: base.gemvs[n][0].shape for n, i in asm.gemvs.items()}
    costs = rtl_costs(CTRL, DXT, asm.words, shapes, R.split_layers(LAYERS, STAGES))
    return layers, asm, costs


def _requests() -> list[R.RingRequest]:
    pool = iter(tokens(sum(p for p, _ in LENGTHS)))
    return [R.RingRequest(tuple(next(pool) for _ in range(p)), g) for p, g in LENGTHS]


def _alone(request: R.RingRequest, r: int, layers, host) -> list[np.ndarray]:
    """The request run alone: the named program (golden/rdxe/program.py) of each layer in turn,
    each layer with its own cache, the host between passes."""
    program = P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)
    states = [P.DxeState() for _ in layers]
    out, inputs = [], None
    for k in range(request.passes):
        inputs = request.prompt[k] if k < len(request.prompt) else inputs
        h = inputs["h"]
        for state, tables in zip(states, layers):
            state.tb.update({**inputs, "h": h})
            h = P.run(program, state, tables).tb["h"]
        out.append(h)
        if len(request.prompt) - 1 <= k < request.passes - 1:
            inputs = host(r, k + 1, {"h": h})
    return out


def _schedule(costs):
    return schedule([Request(p, g) for p, g in LENGTHS], costs, LINK, SLOTS)


def test_every_token_equals_its_request_run_alone(ring):
    """Tokens of three requests interleaved as the cycle model dispatches them, one joining when
    another finishes: every pass's final hidden state equals the request run alone, and the order
    changes no bit."""
    layers, asm, costs = ring
    host, requests = Host(), _requests()
    order = _schedule(costs).order
    assert order != sorted(order)                    # the requests really interleave
    got = R.run_ring(asm, layers, STAGES, SLOTS, requests, host, order)
    for r, request in enumerate(requests):
        want = _alone(request, r, layers, host)
        assert len(got[r]) == request.passes == len(want)
        for k, (a, b) in enumerate(zip(want, got[r])):
            assert np.array_equal(a, b["h"]), f"request {r} pass {k}"
    # Not trivial: every output is finite and distinct.
    flat = [o["h"] for outs in got for o in outs]
    assert np.isfinite(np.stack(flat).view(np.float32)).all()
    assert len({o.tobytes() for o in flat}) == len(flat)
    again = R.run_ring(asm, layers, STAGES, SLOTS, requests, host)
    assert all(np.array_equal(a["h"], b["h"]) for x, y in zip(got, again) for a, b in zip(x, y))


@pytest.mark.parametrize("mutation", ["shared_groups", "no_restart"])
def test_slots_keep_their_own_kv_groups(ring, monkeypatch, mutation):
    """Requests in one DXE must not share KV groups, and a joining request starts at position 0:
    with every slot's base the same, or the slot's position kept from the request before, the
    interleaved run differs from the requests run alone."""
    layers, asm, costs = ring
    host, requests = Host(), _requests()
    if mutation == "shared_groups":
        monkeypatch.setattr(R, "kv_base", lambda slot, layer, layers, groups: layer * groups)
    else:
        monkeypatch.setattr(R.Dxe, "admit", lambda self, slot: None)
    got = R.run_ring(asm, layers, STAGES, SLOTS, requests, host, _schedule(costs).order)
    assert not all(np.array_equal(a, b["h"]) for r, req in enumerate(requests)
                   for a, b in zip(_alone(req, r, layers, host), got[r]))


def test_slots_and_kv_groups():
    """A finished request's slot goes to the next waiting request; its KV groups are the slot's."""
    assert R.dispatch_slots([4, 2, 3], 2, [0, 1, 0, 1, 2, 0, 2, 0, 2]) == [0, 1, 1]
    assert R.dispatch_slots([1, 2, 1], 2, [0, 2, 1, 1]) == [0, 1, 0]
    assert [R.kv_base(s, l, 2, 3) for s in (0, 1) for l in (0, 1)] == [0, 3, 6, 9]
    assert R.split_layers(30, 4) == (8, 8, 7, 7)


def test_the_dxe_cost_is_the_controllers_model(ring):
    """A layer's cycles are the run the RTL takes for the reduced layer (tests/test_rdxe_side.py
    measures TOKEN a token, 1 and 2 tokens in the cache); a DXE of 2 layers adds the layer
    overhead to each; only attention grows with the context."""
    layers, asm, costs = ring
    shapes = {i: layers[0].gemvs[n][0].shape for n, i in asm.gemvs.items()}
    at = [program_cycles(CTRL, DXT, asm.words, shapes, T) for T in (1, 2, 4, 5, 16)]
    assert at[:3] == [TOKEN] * 3 and at[2] < at[3] < at[4]
    assert [cost(1) for cost in costs] == [2 * (TOKEN + 1)] * 2
    assert rtl_costs(CTRL, DXT, asm.words, shapes, (3,), layer_overhead=0)[0](2) == 3 * TOKEN


def test_the_schedule_by_hand(ring):
    """The first tokens' cycles by hand: every token costs c = 2 (TOKEN + 1) on a DXE (contexts
    up to 4), a link 6 (rows of 4 of h, cos, sin)."""
    _, _, costs = ring
    s = _schedule(costs)
    c, L = 2 * (TOKEN + 1), LINK
    assert L == 6
    # Request 0's first prompt token enters at 0 and crosses link_in, DXE 0, link, DXE 1.
    assert s.dispatch[0] == (0, 0, 0)
    assert s.start[0].tolist() == [L, L + c + L] and s.finish[0].tolist() == [L + c, 2 * L + 2 * c]
    # Request 1's prompt token enters when link_in frees (6), waits there for DXE 0, and on DXE
    # 1 waits for token 0 (it reaches the link at L + 2c, DXE 1 frees at 2L + 2c).
    assert s.dispatch[1] == (1, 0, L)
    assert s.start[1].tolist() == [L + c, 2 * L + 2 * c]
    # Request 0's second prompt token enters when DXE 0 takes token 1 from link_in.
    assert s.dispatch[2] == (0, 1, L + c) and s.start[2, 0] == L + 2 * c
    # Request 1's generated token waits for its prompt token to leave the ring (DXE 1 finishes
    # it at 2L + 3c); request 0's next is a generated token too, not ready before then.
    assert s.dispatch[3] == (1, 1, 2 * L + 3 * c) and s.start[3, 0] == 3 * L + 3 * c
    # Request 1 is done after 2 passes; request 2 takes its slot when its last token leaves.
    assert s.slots == [0, 1, 1] and s.admitted[2] == s.finished[1]
    assert s.busy.tolist() == [9 * c, 9 * c] and s.makespan == s.finish[-1, -1]


def test_schedule_properties(ring):
    """On the scenario and on a larger workload with context-dependent costs: a DXE serves one
    token at a time in dispatch order, a token crosses the link between DXEs, a generated token
    enters after its previous left the ring, and utilization = busy / (S x makespan)."""
    _, _, costs = ring
    rng = np.random.default_rng(3)
    lengths = [(int(p), int(g)) for p, g in rng.integers(1, 9, (7, 2))]
    for s, reqs, cost, link in [
            (_schedule(costs), LENGTHS, costs, LINK),
            (schedule([Request(p, g) for p, g in lengths],
                      [lambda T: 100 + 7 * T, lambda T: 90 + 9 * T, lambda T: 120], 13, 3),
             lengths, [lambda T: 100 + 7 * T, lambda T: 90 + 9 * T, lambda T: 120], 13)]:
        S = len(cost)
        assert np.all(s.start[1:] >= s.finish[:-1])
        assert np.all(s.start[:, 1:] >= s.finish[:, :-1] + link)
        want = [sum(cost[d](k + 1) for _, k, _ in s.dispatch) for d in range(S)]
        assert s.busy.tolist() == want == (s.finish - s.start).sum(axis=0).tolist()
        assert s.ring_utilization == pytest.approx(sum(want) / (S * s.makespan), abs=0)
        assert np.allclose(s.utilization, np.array(want) / s.makespan)
        left = {}
        for i, (r, k, t) in enumerate(s.dispatch):
            if k >= reqs[r][0]:
                assert t >= left[(r, k - 1)], (r, k)
            left[(r, k)] = s.finish[i, -1]
        assert 0 < s.ring_utilization < 1


def test_messages(ring):
    layers, asm, costs = ring
    plain = A.assemble(P.llama_layer(HEADS, KV_HEADS, HEAD_DIM), layers[0], INPUTS, ["h"], SPACE,
                       HEAD_DIM)
    with pytest.raises(ValueError, match="^a ring's layer program must assemble every input in "
                                         "place or kept; input 'h' is neither$"):
        R.Dxe(plain, layers[:2], SLOTS)
    with pytest.raises(ValueError, match=r"^order\[2\] dispatches request 2, which is not resident "
                                         r"then; resident: \[0, 1\]$"):
        R.dispatch_slots([2, 2, 1], 2, [0, 1, 2])
    with pytest.raises(ValueError, match=r"^order dispatches \[1, 2\] passes of the requests; "
                                         r"they have \[2, 2\]$"):
        R.dispatch_slots([2, 2], 2, [0, 1, 1])
    with pytest.raises(TypeError, match="^Prompt must be a non-empty tuple of input dicts, not "
                                        "list$"):
        R.RingRequest([{}], 1)
    with pytest.raises(ValueError, match="^Generation length must be between 1 and 32768, not 0$"):
        R.RingRequest(({},), 0)
    with pytest.raises(TypeError, match="^Requests must be a non-empty list of RingRequest$"):
        R.run_ring(asm, layers, STAGES, SLOTS, [], Host())
    with pytest.raises(ValueError, match="^Ring size must be between 1 and 4, not 5$"):
        R.run_ring(asm, layers, 5, SLOTS, _requests(), Host())
    with pytest.raises(TypeError, match="^Costs must be a non-empty list of functions of the "
                                        "context, not 3$"):
        schedule([Request(1, 1)], 3, LINK, SLOTS)
    with pytest.raises(ValueError, match="^Link cycles must be between 0 and 1048576, not -1$"):
        schedule([Request(1, 1)], costs, -1, SLOTS)
    with pytest.raises(ValueError, match="^Layer overhead must be between 0 and 65536, not -2$"):
        rtl_costs(CTRL, DXT, asm.words, {}, (2,), layer_overhead=-2)
    with pytest.raises(ValueError, match="^Context length must be between 1 and 65536, not 0$"):
        program_cycles(CTRL, DXT, asm.words, {}, 0)
