# amaranth: UnusedElaboratable=no
# (the designs refused by test_bad_arguments_are_refused are never elaborated)
"""Tests of the SymbiYosys helper in synth/formal.py on small Amaranth designs."""

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from synth.formal import assert_proved, prove, read_vcd

LIMIT = 9  # the counter wraps from LIMIT to 0, so it never exceeds LIMIT


class WrappingCounter(wiring.Component):
    """Counts 0..LIMIT while ``en`` is high, then wraps; asserts ``count <= bound``."""

    en: In(1)
    count: Out(4)

    def __init__(self, bound, *, domain="comb"):
        self.bound, self.domain = bound, domain
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            with m.If(self.count == LIMIT):
                m.d.sync += self.count.eq(0)
            with m.Else():
                m.d.sync += self.count.eq(self.count + 1)
        m.d[self.domain] += Assert(self.count <= self.bound, "count stays within bound")
        return m


class NotInductive(WrappingCounter):
    """``count != 12`` holds (12 is unreachable) but is not inductive: 11 -> 12 is a transition."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += Assert(self.count != 12, "never twelve")
        return m


def test_true_invariant_is_proved_by_induction(tmp_path):
    result = prove(WrappingCounter(bound=LIMIT), None, tmp_path, mode="prove", depth=5)
    assert result.passed and result.status == "PASS"
    assert result.counterexample == "" and result.trace_vcd is None
    assert result.log_path.is_file()
    assert_proved(result)


def test_false_assertion_gives_a_counterexample(tmp_path):
    bound = 7
    result = prove(WrappingCounter(bound=bound), None, tmp_path, mode="bmc", depth=12)
    assert not result.passed and result.status == "FAIL"
    text = result.counterexample
    assert "'count stays within bound'" in text
    assert f"(step {bound + 1})" in text  # count reaches bound + 1 after bound + 1 enabled steps
    assert "step | count | en | rst" in text
    fail_rows = [line for line in text.splitlines() if line.endswith("<- fails")]
    assert len(fail_rows) == 1
    assert [c.strip() for c in fail_rows[0].split("|")][:2] == [str(bound + 1), str(bound + 1)]
    widths, steps = read_vcd(result.trace_vcd)
    assert widths["count"] == 4
    assert int(steps["count"][bound + 1], 2) == bound + 1
    with pytest.raises(AssertionError, match="count stays within bound"):
        assert_proved(result)


def test_sync_assertion_fails_one_step_later(tmp_path):
    result = prove(WrappingCounter(bound=7, domain="sync"), None, tmp_path, mode="prove", depth=12)
    assert result.status == "FAIL"
    assert "(step 9)" in result.counterexample  # sampled at the edge after count == 8


def test_unreachable_but_not_inductive_is_unknown(tmp_path):
    result = prove(NotInductive(bound=15), None, tmp_path, mode="prove", depth=4)
    assert not result.passed and result.status == "UNKNOWN"
    assert "induction with k=4 failed" in result.counterexample
    assert "'never twelve'" in result.counterexample
    assert result.trace_vcd.name == "trace_induct.vcd"
    # BMC finds nothing, because 12 is unreachable from reset.
    assert prove(NotInductive(bound=15), None, tmp_path / "bmc", mode="bmc", depth=16).passed


class Registered(Elaboratable):
    """Plain elaboratable: ``q`` registers ``a``; ``q < 10`` holds only if ``a < 10`` is assumed."""

    def __init__(self, *, assume):
        self.assume = assume
        self.a = Signal(4)
        self.q = Signal(4)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.q.eq(self.a)
        if self.assume:
            m.d.comb += Assume(self.a < 10)
        m.d.comb += Assert(self.q < 10, "q below ten")
        return m


@pytest.mark.parametrize("assume", [True, False])
def test_plain_elaboratable_with_ports_and_assumption(tmp_path, assume):
    design = Registered(assume=assume)
    result = prove(design, [design.a, design.q], tmp_path, mode="prove", depth=3)
    assert result.passed == assume
    if not assume:
        # a is free: the solver sets it to 10 or more in step 0, and q follows in step 1.
        assert "(step 1)" in result.counterexample
        widths, steps = read_vcd(result.trace_vcd)
        assert int(steps["a"][0], 2) >= 10 and int(steps["q"][1], 2) >= 10


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"^Mode must be one of 'prove', 'bmc', not 'cover'$"):
        prove(WrappingCounter(bound=LIMIT), None, tmp_path, mode="cover")
    with pytest.raises(ValueError, match=r"^Depth must be a positive integer number of steps, "
                                         r"not 0$"):
        prove(WrappingCounter(bound=LIMIT), None, tmp_path, depth=0)
    with pytest.raises(ValueError, match="Ports must be given"):
        prove(Registered(assume=True), None, tmp_path)


class NoAssert(wiring.Component):
    q: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.q.eq(~self.q)
        return m


def test_design_without_assert_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no Assert statement"):
        prove(NoAssert(), None, tmp_path)
