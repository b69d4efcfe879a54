"""A back-end whose named layers run their hardware operations on the generated Verilog
(``memwall model generate --rtl``).

:class:`RTLLayers` wraps a back-end (:mod:`sim.llm.backends`). While :attr:`RTLLayers.enabled`,
every hook call of a named layer that the family's blocks compute (the family module's
``SWAP_HOOKS``: for KVNAND the projections and the attention on the in-flash PE; for FlowKV the
projections on FusedDQP and the attention on the array of pairs) becomes that hook's ops: the
family's case builder (``ops(capture, ops=...)``, :mod:`sim.llm.cases`) is given a one-call
capture, the ops run in the simulator (:func:`cocotb_tests.realdata.run_ops`), and the hook
returns what the RTL produced, put back in the hook's shape by the family's ``assemble(hook,
args, outputs)``. The back-end's own result for the call is computed too: it is each op's
expected array, and a run whose outputs differ from it in any bit stops the generation with
:class:`RTLMismatch` (one line: op, element, expected, got), so every value that flows on came
from the RTL and equals the golden's. Host steps (RMSNorm, RoPE, KVNAND's softmax, SwiGLU,
residuals, the embedding and the head) stay the back-end's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sim.llm.cases import HOOKS, Call, Capture, family_module, save_ops

from . import family_module as rtl_module
from . import run_ops

__all__ = ["RTLLayers", "RTLMismatch", "parse_layers"]


class RTLMismatch(RuntimeError):
    """An RTL output that differs from the back-end's; the message is one line."""


def parse_layers(text: str, layers: int) -> list[int]:
    """``"0-1"``, ``"3"`` or ``"0,2,5"`` -> sorted layer indices; ``ValueError`` names the model's
    range."""
    out = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi if hi else lo) + 1))
    except ValueError:
        raise ValueError(f"--layers must be like 0-1, 3 or 0,2,5, not {text!r}") from None
    if not out or min(out) < 0 or max(out) >= layers:
        raise ValueError(f"--layers must name layers from 0 to {layers - 1}, not {text!r}")
    return sorted(out)


class RTLLayers:
    """``numerics`` with the hooks of ``layers`` on ``family``'s Verilog (module notes).

    Parameters
    ----------
    numerics : the back-end (its attributes are this object's).
    family : str
        The hardware family (:data:`sim.llm.cases.FAMILIES`) whose case builder and runs are used.
    layers : list of int
        The layers swapped.
    simulator : str
        ``icarus`` or ``verilator``.
    folder : Path
        Where the ops of each call and the simulators' output are written.
    progress : callable, optional
        Called with one line per simulation.

    Attributes
    ----------
    enabled : bool
        Off: every call is the back-end's (a prefill); on: the named layers run in RTL.
    runs : list of dict
        Per hook call run in RTL: layer, hook, ops, RTL cycles, seconds.
    """

    def __init__(self, numerics, family: str, layers, simulator: str, folder: Path, *,
                 progress=None, position: int = 0):
        self.inner = numerics
        self.family = family
        self.cases = family_module(family)
        rtl_module(family)                       # the family's runs exist
        self.layers = set(layers)
        self.simulator = simulator
        self.folder = Path(folder)
        self.progress = progress
        self.enabled = False
        self.position = position
        self.runs: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _hook(self, hook: str, args: tuple):
        layer = args[1] if hook == "norm" else args[0]
        result = getattr(self.inner, hook)(*args)
        if not (self.enabled and layer in self.layers and hook in self.cases.SWAP_HOOKS):
            return result
        call_args = (args[0], args[2]) if hook == "norm" else args[1:]
        return self._on_rtl(layer, hook, call_args, result)

    def _on_rtl(self, layer: int, hook: str, args: tuple, result):
        calls = [Call(hook, args, result)]
        if hook == "norm_project":               # the builder reads the norm's output too
            h, norm = args[0], args[1]
            calls.insert(0, Call("norm", (h, norm), self.inner.norm(h, layer, norm)))
        cap = Capture(layer, self.position, [], self.inner, None, calls)
        ops = self.cases.ops(cap, **self.cases.swap_options(hook, args))
        path = self.folder / f"L{layer}-T{self.position}-{hook}-{os.getpid()}.npz"
        save_ops(path, ops, {"layer": layer, "position": self.position, "hook": hook})
        start = time.perf_counter()
        if self.progress is not None:
            self.progress(f"layer {layer}, position {self.position}: {hook} "
                          f"({', '.join(op.name for op in ops)}) on the RTL")
        results = run_ops(self.family, ops, path, self.simulator,
                          log=self.folder / "simulator.log")
        bad = next((r for r in results if not r.match), None)
        if bad is not None or len(results) != len(ops):
            why = bad.mismatch if bad is not None else "not every op ran"
            raise RTLMismatch(f"layer {layer}, position {self.position}, {bad.op if bad else hook}"
                              f": {why}")
        self.runs.append({"layer": layer, "position": self.position, "hook": hook,
                          "ops": [r.op for r in results],
                          "cycles": sum(r.cycles or 0 for r in results),
                          "seconds": round(time.perf_counter() - start, 2)})
        path.unlink(missing_ok=True)
        return self.cases.assemble(hook, args, {r.op: r.outputs for r in results})


def _delegate(hook: str):
    def method(self, *args):
        return self._hook(hook, args)
    method.__name__ = hook
    method.__doc__ = f"The back-end's ``{hook}``, on the RTL for a swapped layer."
    return method


for _hook_name in HOOKS:
    setattr(RTLLayers, _hook_name, _delegate(_hook_name))
