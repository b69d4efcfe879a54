"""In-process checks of the UMDAM mapper and composer RTL: Amaranth simulation and formal proofs.

* Simulation (``amaranth.sim``): the combinational (``latency=0``) mapper and composer on small
  geometries, every address / every coordinate tuple under every select value (including the ones
  with no mapping), against the golden model; ``ready`` passing straight through; and the registered
  mapper under random stalls.
* Formal (``synth.formal.prove``, SymbiYosys): for all 2**33 LPDDR5 addresses and every select,
  composer(mapper(address)) == address, the error flags agree, and two mappings' fields equal
  bit slices written out by hand; the registered mapper's stream contract (the generic harness of
  synth/contract.py) with its output mapped back to the accepted address. Negative checks show
  that each property fails on a broken design and that the counterexample names the failing
  assertion (the harness's own: tests/test_stream_contract.py).

The random seed is ``SEED``; failure messages name the input that failed.
"""

import itertools
import random

import numpy as np
import pytest
from amaranth import Cat, Elaboratable, Module, Signal
from amaranth.hdl import Assert
from amaranth.sim import Simulator

import golden.umdam as golden
from hdl.umdam import AddressComposer, AddressMapper, AddressMapping, DramGeometry
from synth.contract import Answers, StreamContract
from synth.formal import assert_proved, prove

from .umdam_cases import LPDDR5, RANKS_BG, SEED, SMALL

#: A DDR-like geometry with 2 ranks and 4 bank groups (32 address bits).
DDR_LIKE = DramGeometry(channels=2, ranks=2, bankgroups=4, banks=4, rows=32768, columns=128,
                        burst_bytes=16, interleave_bytes=128)

HASH_ALL = "row-colM-bankgroup^row-bank^row-rank^row-channel^row-colL-offset"
HASH_BANK_CHANNEL = "row-colM-bank^row-rank-channel^row-colL-offset"
NAMED = ("umdam", "rocobaracho", "robaracoch", "ianus")


def mappings(geometry, specs):
    return [AddressMapping(spec, geometry) for spec in specs]


def present(geometry):
    """Coordinates with a non-zero width, with their widths (log2 of the geometry's counts)."""
    counts = {"channel": geometry.channels, "rank": geometry.ranks,
              "bankgroup": geometry.bankgroups, "bank": geometry.banks, "row": geometry.rows,
              "col": geometry.columns, "offset": geometry.burst_bytes}
    return {name: count.bit_length() - 1 for name, count in counts.items() if count > 1}


def select_bits(count):
    return (count - 1).bit_length()


# --------------------------------------------------------------------------------------------------
# Simulation

SIM_CONFIGS = {
    "small-preset": (SMALL, ("umdam", "robaracoch", "ianus")),         # 3: has an error flag
    "ranks-bg-hashed": (RANKS_BG, ("umdam", HASH_ALL, "ianus", "rocobaracho")),  # 4: none
    "single": (SMALL, (HASH_BANK_CHANNEL,)),                           # no select field at all
    # no channel bits, no colL bits, and a 3-bit bank hashed with a 2-bit row
    "wide-bank": (DramGeometry(channels=1, ranks=1, bankgroups=4, banks=8, rows=4, columns=16,
                               burst_bytes=2, interleave_bytes=2), (HASH_ALL, "robaracoch")),
}


#: SIM_CONFIGS run in make test but the small preset: cocotb's exhaustive test runs its three
#: mappings, every address and coordinate tuple under every select, on the same mapping logic
#: (umdam-small and umdam-composer-small, registered), and the other three run it at latency 0.
SIM_RUNS = [pytest.param(c, marks=[pytest.mark.slow] if c == "small-preset" else [])
            for c in SIM_CONFIGS]


def run(dut, testbench, clocked=False):
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("config", SIM_RUNS)
def test_combinational_mapper_matches_golden_on_every_address(config):
    geometry, specs = SIM_CONFIGS[config]
    mps = mappings(geometry, specs)
    dut = AddressMapper(mps, latency=0)
    fields = present(geometry)
    count = 1 << geometry.address_bits
    selects = range(1 << select_bits(len(mps)))          # includes the unused select values
    has_error = len(mps) & (len(mps) - 1) != 0
    got = {name: [] for name in [*fields, "error"]}

    async def testbench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 1)
        for select in selects:
            if len(mps) > 1:
                ctx.set(dut.i.payload.mapping, select)
            for address in range(count):
                ctx.set(dut.i.payload.addr, address)
                out = ctx.get(dut.o.payload)
                for name in fields:
                    got[name].append(getattr(out, name))
                got["error"].append(out.error if has_error else 0)

    run(dut, testbench)
    addresses = np.tile(np.arange(count), len(selects))
    sel = np.repeat(np.arange(len(selects)), count)
    want = golden.mapper_outputs(mps, addresses, sel)
    for name in [*fields, "error"]:
        bad = np.flatnonzero(np.asarray(got[name]) != want[name])
        assert bad.size == 0, (f"{config}: select {sel[bad[0]]}, address {addresses[bad[0]]:#x}: "
                               f"{name} expected {want[name][bad[0]]}, got {got[name][bad[0]]}")
    if has_error:
        assert np.asarray(got["error"]).sum() == count * (len(selects) - len(mps))


@pytest.mark.parametrize("config", SIM_RUNS)
def test_combinational_composer_matches_golden_on_every_coordinate(config):
    geometry, specs = SIM_CONFIGS[config]
    mps = mappings(geometry, specs)
    dut = AddressComposer(mps, latency=0)
    fields = present(geometry)
    tuples = list(itertools.product(*(range(1 << w) for w in fields.values())))
    selects = range(1 << select_bits(len(mps)))
    has_error = len(mps) & (len(mps) - 1) != 0
    got_addr, got_error = [], []

    async def testbench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 1)
        for select in selects:
            if len(mps) > 1:
                ctx.set(dut.i.payload.mapping, select)
            for values in tuples:
                for name, value in zip(fields, values):
                    ctx.set(dut.i.payload[name], value)
                got_addr.append(ctx.get(dut.o.payload.addr))
                got_error.append(ctx.get(dut.o.payload.error) if has_error else 0)

    run(dut, testbench)
    columns = np.array(tuples, dtype=np.uint64).T
    coords = dict(zip(fields, columns))
    for select in selects:
        chunk = slice(select * len(tuples), (select + 1) * len(tuples))
        addr, error = np.asarray(got_addr[chunk]), np.asarray(got_error[chunk])
        if select < len(mps):
            want = golden.compose_addresses(mps[select], coords)
            assert not error.any(), f"{config}: select {select} flagged an error"
        else:
            # no mapping: the error flag, and (like the mapper's all-zero coordinates) address 0
            want = np.zeros(len(tuples), np.uint64)
            assert error.all(), f"{config}: select {select} not flagged"
        bad = np.flatnonzero(addr != want)
        assert bad.size == 0, (f"{config}: select {select}, coordinates "
                               f"{dict(zip(fields, tuples[bad[0]]))}: expected address "
                               f"{int(want[bad[0]]):#x}, got {int(addr[bad[0]]):#x}")
        if select < len(mps):     # a bijection: every address exactly once
            assert sorted(addr.tolist()) == list(range(1 << geometry.address_bits))


@pytest.mark.parametrize("component", [AddressMapper, AddressComposer])
def test_combinational_ready_and_valid_pass_straight_through(component):
    dut = component(mappings(SMALL, ("umdam", "ianus")), latency=0)
    seen = []

    async def testbench(ctx):
        for o_ready, i_valid in itertools.product((0, 1), repeat=2):
            ctx.set(dut.o.ready, o_ready)
            ctx.set(dut.i.valid, i_valid)
            seen.append(((o_ready, i_valid), (ctx.get(dut.i.ready), ctx.get(dut.o.valid))))

    run(dut, testbench)
    assert seen == [((r, v), (r, v)) for r, v in itertools.product((0, 1), repeat=2)]


def test_registered_mapper_under_random_stalls_matches_golden():
    mps = mappings(SMALL, ("umdam", "robaracoch", "ianus"))
    dut = AddressMapper(mps, latency=1)
    rng = random.Random(SEED)
    sent, received = [], []
    cycles = 600

    async def testbench(ctx):
        for cycle in range(cycles):
            valid = rng.random() < 0.7
            request = (rng.randrange(1 << 12), rng.randrange(4))
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload.addr, request[0])
            ctx.set(dut.i.payload.mapping, request[1])
            ctx.set(dut.o.ready, rng.random() < 0.6)
            # sample the handshakes just before the clock edge
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                sent.append(request)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                out = ctx.get(dut.o.payload)
                received.append(tuple([*(getattr(out, n) for n in present(SMALL)), out.error]))
            await ctx.tick()

    run(dut, testbench, clocked=True)
    assert len(sent) > cycles // 4 and len(received) >= len(sent) - 1, (len(sent), len(received))
    addresses, selects = zip(*sent[:len(received)])
    want = golden.mapper_outputs(mps, list(addresses), list(selects))
    for n, beat in enumerate(received):
        expected = tuple([*(int(want[name][n]) for name in present(SMALL)), int(want["error"][n])])
        assert beat == expected, (f"beat {n} (seed {SEED}): request {sent[n]}: expected "
                                  f"{expected}, got {beat}")


# --------------------------------------------------------------------------------------------------
# Formal: composer(mapper(address)) == address


def lpddr5_umdam_slices(a):
    # UMDAM on LPDDR5: offset [4:0], colL [7:5], channel [9:8], bank [13:10], colM [16:14],
    # row [32:17]; col = colM:colL
    return {"offset": a[0:5], "col": Cat(a[5:8], a[14:17]), "channel": a[8:10],
            "bank": a[10:14], "row": a[17:33]}


def lpddr5_ianus_slices(a):
    # Ianus on LPDDR5: offset [4:0], col [10:5], row [26:11], bank [30:27], channel [32:31]
    return {"offset": a[0:5], "col": a[5:11], "row": a[11:27], "bank": a[27:31],
            "channel": a[31:33]}


def ranks_bg_ianus_slices(a):
    # Ianus on DDR_LIKE (1 + 1 + 2 + 2 + 15 + 7 + 4 = 32 bits): offset [3:0], col [10:4],
    # row [25:11], bank [27:26], bankgroup [29:28], rank [30], channel [31]
    return {"offset": a[0:4], "col": a[4:11], "row": a[11:26], "bank": a[26:28],
            "bankgroup": a[28:30], "rank": a[30], "channel": a[31]}


class RoundTrip(Elaboratable):
    """Free address and select -> mapper (latency 0) -> composer (latency 0) -> the same address.

    ``slices`` maps a select value to a function giving, from the address, the coordinates that
    mapping must produce (hand-written bit slices).
    """

    def __init__(self, geometry, mapper_specs, composer_specs=None, slices=None):
        self.count = len(mapper_specs)
        self.mapper = AddressMapper(mappings(geometry, mapper_specs), latency=0)
        self.composer = AddressComposer(mappings(geometry, composer_specs or mapper_specs),
                                        latency=0)
        self.fields = list(present(geometry))
        self.slices = slices or {}
        self.addr = Signal(geometry.address_bits)
        self.sel = Signal(select_bits(self.count))
        self.ports = [self.addr, self.sel] if self.count > 1 else [self.addr]

    def elaborate(self, platform):
        m = Module()
        m.submodules.mapper = mapper = self.mapper
        m.submodules.composer = composer = self.composer
        m.d.comb += [mapper.i.valid.eq(1), mapper.i.payload.addr.eq(self.addr),
                     composer.i.valid.eq(mapper.o.valid), mapper.o.ready.eq(composer.i.ready),
                     composer.o.ready.eq(1)]
        for name in self.fields:
            m.d.comb += composer.i.payload[name].eq(mapper.o.payload[name])
        if self.count > 1:
            m.d.comb += [mapper.i.payload.mapping.eq(self.sel),
                         composer.i.payload.mapping.eq(self.sel)]
        if self.count & (self.count - 1):
            bad = self.sel >= self.count
            m.d.comb += [
                Assert(mapper.o.payload.error == bad, "mapper error flag == (select >= count)"),
                Assert(composer.o.payload.error == bad, "composer error flag == (select >= count)"),
            ]
            with m.If(bad):
                for name in self.fields:
                    m.d.comb += Assert(mapper.o.payload[name] == 0,
                                       f"no mapping: {name} is zero")
            valid_select = ~bad
        else:
            valid_select = 1
        with m.If(valid_select):
            m.d.comb += Assert(composer.o.payload.addr == self.addr, "composer(mapper(a)) == a")
        m.d.comb += [Assert(composer.o.valid, "valid passes through"),
                     Assert(mapper.i.ready, "ready passes through")]
        for select, slices in self.slices.items():
            with m.If(self.sel == select):
                for name, value in slices(self.addr).items():
                    m.d.comb += Assert(mapper.o.payload[name] == value,
                                       f"mapping {select}: {name} is its hand-written bit slice")
        return m


FORMAL_SETS = {
    "lpddr5-named": (LPDDR5, NAMED, {0: lpddr5_umdam_slices, 3: lpddr5_ianus_slices}),
    "lpddr5-hashed": (LPDDR5, (HASH_BANK_CHANNEL, "umdam", "ianus"),
                      {1: lpddr5_umdam_slices, 2: lpddr5_ianus_slices}),
    "ranks-bg": (DDR_LIKE, (*NAMED, HASH_ALL), {3: ranks_bg_ianus_slices}),
}


@pytest.mark.parametrize("name", FORMAL_SETS)
def test_composer_inverts_mapper_formally(name, tmp_path):
    geometry, specs, slices = FORMAL_SETS[name]
    harness = RoundTrip(geometry, specs, slices=slices)
    result = prove(harness, harness.ports, tmp_path, mode="prove", depth=1, timeout=120)
    print(f"\nformal {name}: {len(specs)} mappings, {geometry.address_bits}-bit addresses: "
          f"{result.status} in {result.seconds:.2f} s")
    assert_proved(result)


def test_formal_round_trip_catches_a_mismatched_composer(tmp_path):
    # mapper: umdam; composer: robaracoch. Only addresses whose fields sit in the same place under
    # both mappings survive, so the solver must find one that does not.
    harness = RoundTrip(LPDDR5, ("umdam",), ("robaracoch",))
    result = prove(harness, harness.ports, tmp_path, mode="bmc", depth=1, timeout=120)
    assert not result.passed and result.status == "FAIL"
    assert "composer(mapper(a)) == a" in result.counterexample
    assert "<- fails" in result.counterexample       # the trace table is there
    with pytest.raises(AssertionError, match="composer"):
        assert_proved(result)


def test_formal_slices_catch_a_wrong_mapping(tmp_path):
    # the round trip alone passes for any bijection; the slices pin which one: rocobaracho is not
    # umdam, so its coordinates differ from umdam's hand-written slices
    harness = RoundTrip(LPDDR5, ("rocobaracho", "ianus"), slices={0: lpddr5_umdam_slices})
    result = prove(harness, harness.ports, tmp_path, mode="bmc", depth=1, timeout=120)
    assert result.status == "FAIL"
    assert "mapping 0:" in result.counterexample and "hand-written bit slice" in \
        result.counterexample


# --------------------------------------------------------------------------------------------------
# Formal: the registered mapper's stream contract, and what it maps


class MapperContract(StreamContract):
    """The generic stream contract (:mod:`synth.contract`) of a one-stage mapper, plus: an
    accepted address is output the next cycle, and a combinational composer (``inverse``)
    gives it back from that output (for the ``count`` mappings that exist).

    The composer of every registered block (``umdam-composer``) and the mapper without its
    inverse have their contracts proved in tests/test_stream_contract.py.
    """

    def __init__(self, dut, inverse, fields, count):
        super().__init__(dut, [Answers("i", "o", registered=True)])
        self.inverse, self.fields, self.count = inverse, list(fields), count

    def elaborate(self, platform):
        m = super().elaborate(platform)
        dut, accepted = self.dut, self.past["i"]
        m.submodules.inverse = inverse = self.inverse
        previous = dut.i.payload.shape()(accepted.payload)
        for name in self.fields:
            m.d.comb += inverse.i.payload[name].eq(dut.o.payload[name])
        m.d.comb += inverse.i.payload.mapping.eq(previous.mapping)
        with m.If(self.checked & accepted.fire):
            m.d.comb += Assert(dut.o.valid, "an accepted input is output the next cycle")
            with m.If(previous.mapping < self.count):
                m.d.comb += Assert(inverse.o.payload.addr == previous.addr,
                                   "the output is the mapping of the accepted address")
        return m


def test_registered_mapper_honours_the_stream_contract(tmp_path):
    specs = (HASH_BANK_CHANNEL, "umdam", "ianus")      # 3 mappings: select 3 is an error
    dut = AddressMapper(mappings(LPDDR5, specs), latency=1)
    inverse = AddressComposer(mappings(LPDDR5, specs), latency=0)
    harness = MapperContract(dut, inverse, present(LPDDR5), len(specs))
    result = prove(harness, [], tmp_path, mode="prove", depth=3, timeout=120)
    print(f"\nformal stream contract (registered mapper, 3 mappings): {result.status} in "
          f"{result.seconds:.2f} s")
    assert_proved(result)
