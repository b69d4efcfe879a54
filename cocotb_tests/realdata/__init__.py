"""Real-model data through the generated Verilog: run a case's operations (:mod:`sim.llm.cases`)
on a family's blocks and compare what the RTL produced with what the back-end computed.

Two sides, one module per family (``cocotb_tests.realdata.<family>``, :data:`FAMILY_MODULES`):

* in the simulator, the family's cocotb tests read the ops named by :data:`ENV_OPS` from the
  case file (:data:`ENV_CASE`), drive their inputs through the block's own testbench (whose
  scoreboard also checks every output against the golden model fed by the input monitor), and
  write what came out, in the expected arrays' shapes and codes, with the cycles each op took, to
  :data:`ENV_RESULT` (:func:`write_result`);
* outside it, :func:`run_ops` asks the family's ``runs(ops)`` which blocks, parameters and tests
  cover the ops (a :class:`Run` each), runs them with :func:`cocotb_tests.launcher.run_block`,
  and compares each op's outputs with the case's expected arrays bit for bit
  (:func:`first_mismatch`); ``model_cycles(run, op)`` gives the cycle model's prediction.

Each family's test runs its ops at full rate (their cycles), then again under the testbench's
random idle cycles and back-pressure and checks that both passes agree: the stalled pass, which
``stalled=False`` (:data:`ENV_STALLED`) leaves out. make test's small cases leave it out: the
blocks' random cases check the same stalls on the same Verilog, and the stalled pass was about a
third of a small case's simulation (docs/verification.md).

A family module defines ``runs(ops) -> list[Run]`` and ``model_cycles(run, op) -> int``, and
cocotb tests named as its runs' ``testcase``.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["ENV_CASE", "ENV_OPS", "ENV_RESULT", "ENV_STALLED", "FAMILY_MODULES", "Run",
           "OpResult", "case_ops", "stalled_pass", "write_result", "first_mismatch", "run_ops", "check_case"]

#: The case file (npz of :func:`sim.llm.cases.save_ops`) the simulator reads.
ENV_CASE = "MEMWALL_CASE"
#: The names of the ops one run does, comma-separated.
ENV_OPS = "MEMWALL_CASE_OPS"
#: Where the simulator writes what the RTL produced (npz: ``<op>.<output>`` arrays and
#: ``<op>.cycles``).
ENV_RESULT = "MEMWALL_CASE_RESULT"
#: "0": the simulator runs each op at full rate only, without the stalled pass (module notes).
ENV_STALLED = "MEMWALL_CASE_STALLED"
#: family -> the module of its cocotb tests and runs.
FAMILY_MODULES = {f: f"cocotb_tests.realdata.{f}" for f in ("inflash", "flowkv", "rdxe", "edram")}


@dataclass(frozen=True)
class Run:
    """One simulation: ``block`` at ``params`` runs the cocotb test ``testcase`` over ``ops``
    (names); ``why`` says how the block's size was chosen for the real shapes."""

    block: str
    params: object
    testcase: str
    ops: tuple
    why: str = ""


@dataclass
class OpResult:
    """One op's verdict: bit-exact or the first mismatch, RTL and model cycles, the time of its
    run (shared by the ops of one run)."""

    op: str
    shape: str
    block: str
    match: bool
    mismatch: str | None
    cycles: int | None
    model_cycles: int | None
    seconds: float
    extra: dict = field(default_factory=dict)
    #: What the RTL produced, by the expected arrays' names (empty if the run stopped early).
    outputs: dict = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict:
        return {"op": self.op, "shape": self.shape, "block": self.block, "match": self.match,
                "mismatch": self.mismatch, "cycles": self.cycles,
                "model_cycles": self.model_cycles, "seconds": round(self.seconds, 2),
                **self.extra}


# --- in the simulator -------------------------------------------------------------------------

def case_ops() -> list:
    """The ops this run does (:data:`ENV_OPS`), from the case file."""
    from sim.llm.cases import load_ops
    ops = load_ops(Path(os.environ[ENV_CASE]))[0]
    wanted = os.environ.get(ENV_OPS, "").split(",")
    return [op for op in ops if op.name in wanted]


def stalled_pass() -> bool:
    """Whether this run repeats its ops under random idle cycles and back-pressure
    (:data:`ENV_STALLED`; yes unless it is "0")."""
    return os.environ.get(ENV_STALLED, "1") != "0"


def write_result(op: str, outputs: dict, cycles: int) -> None:
    """Add one op's outputs (arrays, the expected arrays' names) and cycle count to the result
    file (:data:`ENV_RESULT`)."""
    path = Path(os.environ[ENV_RESULT])
    arrays = dict(np.load(path)) if path.exists() else {}
    arrays.update({f"{op}.{k}": np.asarray(v) for k, v in outputs.items()})
    arrays[f"{op}.cycles"] = np.asarray(int(cycles))
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "wb") as f:
        np.savez(f, **arrays)
    os.replace(partial, path)


# --- outside it -------------------------------------------------------------------------------

def first_mismatch(expected: dict, got: dict) -> str | None:
    """None when every expected array is in ``got`` with the same shape and bits; else one line:
    the array, the first differing element (index), expected and got as codes."""
    for name, want in expected.items():
        if name not in got:
            return f"{name}: the RTL produced none"
        have = np.asarray(got[name])
        want = np.asarray(want)
        if have.shape != want.shape:
            return f"{name}: shape {have.shape} from the RTL, {want.shape} expected"
        diff = np.argwhere(have != want)
        if diff.size:
            idx = tuple(int(i) for i in diff[0])
            width = max(4, (want.dtype.itemsize * 2) if want.dtype.kind in "ui" else 4)
            fmt = (lambda x: f"{int(x):#0{width + 2}x}") if want.dtype.kind in "ui" else str
            return (f"{name}{list(idx)}: expected {fmt(want[idx])}, got {fmt(have[idx])} "
                    f"({len(diff)} of {want.size} elements differ)")
    return None


def family_module(family: str):
    from sim.llm.cases import check_family
    check_family(family)
    return importlib.import_module(FAMILY_MODULES[family])


def run_ops(family: str, ops: list, case_path: Path, simulator: str, *,
            log: Path | None = None, progress=None, stalled: bool = True) -> list[OpResult]:
    """Run ``ops`` (of the case in ``case_path``) on ``family``'s blocks under ``simulator`` and
    return one :class:`OpResult` per op, in the order of ``ops`` (module notes). With ``log``,
    each run's simulator output goes to ``<log stem>.<testcase><log suffix>`` beside it;
    ``stalled=False`` leaves out the stalled pass."""
    from .. import launcher
    module = family_module(family)
    case_path = Path(case_path).resolve()        # the simulator runs in its build folder
    log = None if log is None else Path(log).resolve()
    by_name = {op.name: op for op in ops}
    results = {}
    for run in module.runs(ops):
        out = Path(case_path).with_name(f"{Path(case_path).stem}-{run.testcase}-{simulator}"
                                        f"-{os.getpid()}.rtl.npz")
        out.unlink(missing_ok=True)
        if progress is not None:
            progress(f"{run.block} {run.testcase} ({', '.join(run.ops)}) under {simulator}")
        start = time.perf_counter()
        failure = None
        run_log = None if log is None else log.with_name(f"{log.stem}.{run.testcase}{log.suffix}")
        try:
            launcher.run_block(run.block, run.params, simulator, testcase=run.testcase,
                               module=module.__name__, log=run_log,
                               extra_env={ENV_CASE: str(case_path), ENV_OPS: ",".join(run.ops),
                                          ENV_RESULT: str(out),
                                          ENV_STALLED: "1" if stalled else "0"})
        except AssertionError as exc:          # the block's own scoreboard stopped the run
            failure = " ".join(str(exc).split())
        seconds = time.perf_counter() - start
        got = dict(np.load(out)) if out.exists() else {}
        out.unlink(missing_ok=True)
        for name in run.ops:
            op = by_name[name]
            mine = {k[len(name) + 1:]: v for k, v in got.items() if k.startswith(f"{name}.")}
            cycles = mine.pop("cycles", None)
            mismatch = first_mismatch(op.expected, mine) if cycles is not None else \
                (failure or "the run wrote no result")
            results[name] = OpResult(name, op.shape, run.block, mismatch is None, mismatch,
                                     None if cycles is None else int(cycles),
                                     module.model_cycles(run, op), seconds,
                                     {"params": run.params.as_dict(), "why": run.why,
                                      "log": None if run_log is None else str(run_log)},
                                     mine)
    return [results[op.name] for op in ops if op.name in results]


def results_json(family: str, layer: int, position: int, simulator: str,
                 results: list[OpResult]) -> dict:
    """The JSON of ``memwall model layer --rtl``."""
    return {"family": family, "layer": layer, "position": position, "simulator": simulator,
            "ops": [r.as_dict() for r in results],
            "match": bool(results) and all(r.match for r in results)}


def check_case(family: str, spec: dict, simulator: str, *,
               stalled: bool = True) -> list[OpResult]:
    """The launchers' check (cocotb_tests/test_realdata_<family>.py): build the case ``spec``
    (:func:`sim.llm.cases.case`'s layer, position and options) on the default model, run it
    (``stalled``: :func:`run_ops`), and assert that every op ran, is bit-exact and took the cycles
    its model predicts."""
    from sim.llm.cases import case
    from sim.llm.score import model_file
    ops, path = case(model_file(None), family, **spec)
    results = run_ops(family, ops, path, simulator, stalled=stalled)
    assert [r.op for r in results] == [op.name for op in ops], "an op was not run"
    for r in results:
        assert r.match, f"{r.op} ({r.shape}) on {r.block} under {simulator}: {r.mismatch}"
        assert r.cycles == r.model_cycles, (
            f"{r.op} on {r.block} under {simulator}: {r.cycles} RTL cycles, the cycle model "
            f"predicts {r.model_cycles}")
    return results
