# amaranth: UnusedElaboratable=no
# (the components refused by the bad-argument tests are never elaborated)
"""Every registered block's stream contract, proved with SymbiYosys at its ``small`` preset (and
where a parameter builds other RTL, at overrides on it: the rDXE engine on two DXTs).

The harness (:class:`synth.contract.StreamContract`) drives every input stream with free data
under the source's side of the contract (``valid`` and the payload held until ``ready``), every
output stream's ``ready`` freely, and asserts the block's side: an output's ``valid`` stays high,
its payload unchanged, until it is taken. :data:`CONTRACTS` adds, per block, what the block
defines between its streams (docs/verification.md, "Stream contracts", has the table):

* an always-ready pipeline (the arith units): ``o.valid`` is ``i.valid`` of ``latency`` cycles
  before (the registry's latency), so every input comes out and nothing else does;
* a stage or a block that answers requests: no output (no last beat of an answer) that no
  accepted input caused, counted with a bounded counter; a one-stage pipeline's occupancy is what
  its output register shows;
* rdxe-vac's credit rule: with the source keeping it, ``overrun`` never rises.

``mode="prove"`` is k-induction with ``k = depth``; where it does not close the test says so and
checks to a bound (``mode="bmc"``). Tests that take more than a few seconds are ``slow``: the
cheaper contracts of the same family run in ``make test``, and the harness itself is checked on a
broken stage (:func:`test_stream_contract_catches_a_stage_that_drops_stalled_data`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from memwall import registry
from memwall.blocks.rdxe_dxe import TWO_DXTS
from synth.contract import Answers, Delay, StreamContract, ports_of
from synth.formal import assert_proved, prove


def _last(payload):
    return payload.last


def _pipeline(block, params, dut):
    """Delay of ``o`` behind ``i``: the registry's latency of the pipelined unit."""
    return [Delay("i", "o", block.timing(params, dut)["o"].latency)]


@dataclass(frozen=True)
class Contract:
    """One check of a block's contract: what it adds to the handshake, and how it is run.

    ``relations(block, params, dut)`` gives the :mod:`synth.contract` relations; ``depth`` is
    the induction length or the bound (``None``: a pipeline's latency plus 2); ``suffix`` names
    a second check of the block (``test_<block>_stream_contract_<suffix>``); ``note`` says why
    an input is fixed or why induction does not close; ``slow``, when not empty, marks the test
    slow and says which test of ``make test`` covers its code; ``overrides``: text overrides on
    the ``small`` preset (``memwall --set``) for a check at other parameters.
    """

    relations: Callable = lambda block, params, dut: []
    fixed: dict = field(default_factory=dict)
    never: tuple = ()
    mode: str = "prove"
    depth: int | None = None
    slow: str = ""
    suffix: str = ""
    note: str = ""
    overrides: dict = field(default_factory=dict)


#: k of the handshake proofs: it closes them for every block but the two in-flash ones.
HANDSHAKE_DEPTH = 3
#: Bound of the checks whose induction does not close. A walk's first address leaves 4 cycles
#: after its command; one credit too many overruns the VAC at step 13
#: (test_rdxe_vac_stream_contract_needs_its_credits).
BOUND = 20
#: Why the counting relations are bounded: the counter is the harness's, and k-induction may
#: start it at any value, e.g. one below the items a queue holds, which a stall of any length
#: keeps in the queue (tried at k = 4).
NOT_INDUCTIVE = (f"the count of answers is not inductive (a queue's contents are not visible "
                 f"at the ports; UNKNOWN at k = 4 for umdam-tilegen, edram and rdxe-vac): "
                 f"bounded to depth {BOUND}")


#: Why the bounded checks are slow (all but the tile generator's, 1.5 s).
_BOUNDED_SLOW = ("7 s to 3 min; make test proves these blocks' handshakes, and checks the "
                 "counting relation on the UMDAM blocks (the tile generator's to this bound) "
                 "and on a stage that invents an output")


def _checks(relations, *, handshake_slow="", bounded_slow=_BOUNDED_SLOW, fixed=None,
            bounded_fixed=None, never=(), note=""):
    """The handshake proved by k-induction (``fixed`` inputs), then the relations checked to
    :data:`BOUND` (``fixed`` and ``bounded_fixed`` inputs; ``never`` ports)."""
    fixed = dict(fixed or {})
    return (Contract(fixed=fixed, depth=HANDSHAKE_DEPTH, slow=handshake_slow, note=note),
            Contract(relations, fixed={**fixed, **(bounded_fixed or {})}, never=never,
                     mode="bmc", depth=BOUND, slow=bounded_slow, suffix="bounded",
                     note="; ".join(filter(None, (note, NOT_INDUCTIVE)))))


def _bounded_only(relations, note):
    return (Contract(relations, mode="bmc", depth=BOUND, note=note,
                     slow="70 to 100 s; no cheaper check covers the in-flash blocks"),)


_ARITH = ("arith-fpmul", "arith-fpadd", "arith-fpmac", "arith-fpconv", "arith-int2fp",
          "arith-fdot", "arith-exp2", "arith-recip", "arith-rsqrt", "arith-requant", "arith-idot")
_LARGE_SLOW = ("14 to 17 s; the eDRAM and VAC handshake proofs in make test cover the harness "
               "on blocks with queues")
#: The engine holds the DXT and the controller's units.
_DXE_SLOW = ("49 s; the eDRAM and VAC handshake proofs in make test cover the harness on "
             "blocks with queues")
#: The engine's relations: a done a run, an ext_data a read.
_DXE_ANSWERS = (lambda b, p, d: [Answers("run", "done"),
                                 Answers("ext", "ext_data", cause_when=lambda c: ~c.write)])
#: The engine on two DXTs (docs/rdxe.md 16.5): the broadcast, the result queues and their
#: writer, the stride port, at memwall.blocks.rdxe_dxe.TWO_DXTS.
_TWO_DXTS_SLOW = ("49 s of CPU for the handshake, 146 s bounded (5 and 9 min of wall clock "
                  "beside placements); the one-DXT engine's checks above are the same harness, "
                  "and tests/test_rdxe_dxts.py's plumbing test runs the broadcast in make test")
#: Why the ring's check is bounded, and slow.
_RING_NOTE = (f"induction does not close at k = 3 (UNKNOWN on output's payload held: from a state "
              f"where a stage copies into its output link while that link is full, which no "
              f"run reaches but the ports do not show; a stage may wait in that copy for any "
              f"number of cycles, so no k closes it); bounded to depth {BOUND}, which covers "
              f"the host's ext requests and answers, the first link's rows and the first DXE's "
              f"copy in: a token reaches output after more than 40 cycles (6 rows in, then at "
              f"each of the 2 DXEs 7 to copy in, its run and 7 to copy out)")
_RING_SLOW = ("7 min here; make test proves the handshakes of the eDRAM and the VAC, and "
              "cocotb_tests/test_rdxe_ring.py runs the ring's streams")
#: What the bounded in-flash checks reach: not a computed result (tR alone is 40 cycles at the
#: small preset).
_IN_FLASH_BOUND = (f"bounded to depth {BOUND}, which covers a command's setup, its first page "
                   f"reads and a refused command's answer")
_PE_NOTE = (f"induction does not close at k = 8 (UNKNOWN after 129 s, on rd_cmd: the reader "
            f"never runs a GEMV's and an attention walk's reads together, which the ports do "
            f"not show); {_IN_FLASH_BOUND}")
_UNIT_NOTE = (f"induction does not close at k = 3 (on pg_data: its words are read from the page "
              f"buffer while stalled, and that nobody writes the page being programmed is the "
              f"writer's slot bookkeeping, which the ports do not show); {_IN_FLASH_BOUND}")

CONTRACTS = {
    **{name: (Contract(_pipeline),) for name in _ARITH},
    "umdam": (Contract(lambda b, p, d: [Answers("i", "o", registered=True)], depth=2),),
    "umdam-composer": (Contract(lambda b, p, d: [Answers("i", "o", registered=True)],
                                depth=2),),
    "umdam-tilegen": _checks(lambda b, p, d: [Answers("cmd", "o", effect_when=_last)],
                             bounded_slow=""),
    "edram": _checks(lambda b, p, d: [Answers("req", "resp")]),
    "edram-fpga": _checks(lambda b, p, d: [Answers("req", "resp")]),
    "flowkv": _checks(lambda b, p, d: [Answers("cmd", "o", effect_when=_last)],
                      handshake_slow=_LARGE_SLOW),
    "flowkv-array": _checks(lambda b, p, d: [Answers("cmd", f"o{n}", effect_when=_last)
                                             for n in range(p.pairs)],
                            handshake_slow=_LARGE_SLOW),
    "flowkv-dqp": _checks(lambda b, p, d: [
        Answers("cmd", "y", cause_when=lambda c: ~c.dequant, effect_when=_last),
        Answers("cmd", "w", cause_when=lambda c: c.dequant, effect_when=_last)],
        handshake_slow="29 s; the eDRAM and VAC handshake proofs in make test cover the "
                       "harness on blocks with queues"),
    "inflash": _bounded_only(lambda b, p, d: [Answers("cmd", "y", effect_when=_last)],
                             _PE_NOTE),
    "inflash-unit": _bounded_only(lambda b, p, d: [Answers("cmd", "y", effect_when=_last),
                                                   Answers("kv_cmd", "kv_status")],
                                  _UNIT_NOTE),
    "rdxe-vac": _checks(
        lambda b, p, d: [Answers("hlink_i", "o", cause_when=_last, credits=p.queue_depth)],
        fixed={"hlink_o.ready": 1}, bounded_fixed={"rc.valid": 0}, never=("overrun",),
        note="hlink_o.ready is ignored by design (HLINK never stalls), so it is fixed at 1; "
             "the bounded check keeps rc quiet (no RC factor: when one may come is the DXT's "
             "vector engine's timing, not a port rule), so its overrun check covers the hold "
             "and result queues"),
    "rdxe-dxt": _checks(lambda b, p, d: [Answers("cmd", "resp"),
                                         Answers("cmd", "o", effect_when=_last)],
                        handshake_slow=_LARGE_SLOW),
    "rdxe-dxe": _checks(_DXE_ANSWERS, handshake_slow=_DXE_SLOW) + tuple(
        dataclasses.replace(c, overrides=TWO_DXTS, slow=_TWO_DXTS_SLOW,
                            suffix="_".join(filter(None, ("two_dxts", c.suffix))))
        for c in _checks(_DXE_ANSWERS)),
    "rdxe-ring": (Contract(lambda b, p, d: [Answers("input", "output"), *[
        Answers(f"dxe.{i}.ext", f"dxe.{i}.ext_data", cause_when=lambda c: ~c.write)
        for i in range(p.dxes)]], mode="bmc", depth=BOUND, note=_RING_NOTE, slow=_RING_SLOW),),
}


def check_contract(name: str, folder, contract: Contract):
    """Prove (or bound) one check of block ``name``'s contract at its ``small`` preset (with the
    check's ``overrides``)."""
    block = registry.get(name)
    params = block.parameters("small", contract.overrides)
    dut = block.elaborate(params)
    relations = contract.relations(block, params, dut)
    depth = contract.depth
    if depth is None:                    # a pipeline: its latency and two cycles around it
        depth = max(r.latency for r in relations if isinstance(r, Delay)) + 2
    harness = StreamContract(dut, relations, fixed=contract.fixed, never=contract.never)
    start = time.monotonic()
    result = prove(harness, [], folder, mode=contract.mode, depth=depth, timeout=900)
    print(f"\n{name} stream contract{' ' + contract.suffix if contract.suffix else ''}: "
          f"{contract.mode} depth {depth}: {result.status} in {time.monotonic() - start:.1f} s")
    return result


def _contract_test(name: str, contract: Contract):
    def test(tmp_path):
        assert_proved(check_contract(name, tmp_path, contract))
    test.__name__ = f"test_{name.replace('-', '_')}_stream_contract" + (
        f"_{contract.suffix}" if contract.suffix else "")
    what = ("the handshake" if contract.relations is Contract.relations
            else "the handshake and the relations")
    at = " ".join(f"{k}={v}" for k, v in contract.overrides.items())
    test.__doc__ = (f"{name}{' at small with ' + at if at else ''}: {what}, {contract.mode} at "
                    f"depth {contract.depth or 'latency + 2'}"
                    + (f"; {contract.note}" if contract.note else ""))
    # Slow: contract.slow says why and which test of make test covers the code.
    return pytest.mark.slow(test) if contract.slow else test


for _name, _checks_of_block in CONTRACTS.items():
    for _contract in _checks_of_block:
        _test = _contract_test(_name, _contract)
        globals()[_test.__name__] = _test
del _name, _checks_of_block, _contract, _test


def test_every_block_has_a_stream_contract():
    assert sorted(CONTRACTS) == sorted(b.name for b in registry.blocks())


def test_ports_are_walked_with_their_directions():
    dut = registry.get("rdxe-vac").elaborate(registry.get("rdxe-vac").parameters("small"))
    kinds = {p.name: p.kind for p in ports_of(dut)}
    assert kinds["hlink_i"] == "sink" and kinds["o"] == "source"
    assert kinds["credit"] == "output" and kinds["overrun"] == "output"
    edram = registry.get("edram")
    kinds = {p.name: p.kind for p in ports_of(edram.elaborate(edram.parameters("small")))}
    assert kinds["req"] == "sink" and kinds["resp"] == "source"
    assert kinds["std.rdata"] == "input" and kinds["std.we"] == "output"   # nested signature


def test_fixed_inputs_must_exist():
    dut = registry.get("umdam").elaborate(registry.get("umdam").parameters("small"))
    with pytest.raises(ValueError, match="o.valid"):
        StreamContract(dut, fixed={"o.valid": 1})        # an output, not an input


def test_bad_relations_are_refused():
    def harness(*relations, **kwargs):
        dut = registry.get("umdam").elaborate(registry.get("umdam").parameters("small"))
        return StreamContract(dut, relations, **kwargs)
    with pytest.raises(ValueError, match="'overrun' names no output of .*; its outputs: none"):
        harness(never=("overrun",))
    with pytest.raises(ValueError, match="'x' names no sink of .*; its sinks: i"):
        harness(Answers("x", "o")).elaborate(None)
    with pytest.raises(ValueError, match="Delay needs always-ready streams, and i has a ready"):
        harness(Delay("i", "o", 1)).elaborate(None)
    with pytest.raises(ValueError, match="so effect_when must be None, not <function"):
        harness(Answers("i", "o", effect_when=_last, registered=True)).elaborate(None)


class DropsWhenStalled(wiring.Component):
    """A broken register stage: it ignores ``o.ready`` and overwrites its output every cycle."""

    def __init__(self, width):
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(1)
        m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m


def test_stream_contract_catches_a_stage_that_drops_stalled_data(tmp_path):
    result = prove(StreamContract(DropsWhenStalled(8)), [], tmp_path, mode="prove", depth=3,
                   timeout=120)
    assert result.status == "FAIL"
    assert "held until" in result.counterexample
    with pytest.raises(AssertionError, match="held until"):
        assert_proved(result)


def test_answers_catches_an_output_nobody_asked_for(tmp_path):
    # A stage that offers an output while it takes no input invents it.
    class Invents(DropsWhenStalled):
        def elaborate(self, platform):
            m = Module()
            m.d.comb += [self.i.ready.eq(0), self.o.valid.eq(1)]
            return m
    harness = StreamContract(Invents(8), [Answers("i", "o")])
    result = prove(harness, [], tmp_path, mode="bmc", depth=2, timeout=120)
    assert result.status == "FAIL"
    assert "nothing comes out that i did not cause" in result.counterexample


# Slow (5 s): the VAC's bounded check is slow too; this shows that its bound reaches the case.
@pytest.mark.slow
def test_rdxe_vac_stream_contract_needs_its_credits(tmp_path):
    """With one credit more than the VAC grants, the bounded check finds an overrun."""
    vac = CONTRACTS["rdxe-vac"][1]
    greedy = dataclasses.replace(vac, relations=lambda b, p, d: [
        Answers("hlink_i", "o", cause_when=_last, credits=p.queue_depth + 1)])
    result = check_contract("rdxe-vac", tmp_path, greedy)
    assert result.status == "FAIL"
    assert "'overrun stays 0'" in result.counterexample
