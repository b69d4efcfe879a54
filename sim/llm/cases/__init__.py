"""Real-model cases for the RTL: one decoder layer's operations of one hardware family at one
decode position, with the inputs in the codes the family's blocks take and the outputs that the
family's back-end (:mod:`sim.llm.backends`) computed for them.

Contract
--------
* :func:`capture` runs a back-end over a prompt: the first ``T`` tokens as a prefill (which
  builds the KV cache up to position ``T - 1`` with the back-end's own numerics), then the decode
  step of token ``T`` at position ``T``, recording every hook call (:data:`HOOKS`) of one layer in
  that step: its arguments and what the back-end returned. Nothing in the back-end changes.
* A family's module (:data:`FAMILIES`) turns a :class:`Capture` into :class:`Op` s: per operation
  its input arrays (hardware codes: fp16/bf16/INT8 as unsigned integers, Q4_1 blocks...) and the
  expected output arrays (the back-end's result, as the block's output codes), with a short
  description of the real shape (``576 x 576, fp16``).
* :func:`case` returns a family's ops at ``(layer, position)``, cached under ``build/llm/cases``
  by the SHA-256 of everything that decides them: the model file's bytes, the prompt's token ids,
  the family and its options, and the source of ``sim/llm`` and ``golden``. A file is written
  under a temporary name and renamed, so readers never see half of one; a file that cannot be read
  is rebuilt. Nothing produced by the RTL is ever stored here.

The prompt is the scoring text (:func:`sim.llm.score.default_text`) cut to ``position + 1``
tokens unless ids are given.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["HOOKS", "FAMILIES", "Call", "Capture", "Op", "capture", "case", "prompt_ids",
           "save_ops", "load_ops", "check_layer", "check_family", "CASE_FOLDER", "CaseError"]

#: The back-end hooks recorded (:class:`sim.llm.model.Numerics`).
HOOKS = ("norm", "norm_project", "project", "keep", "attention", "glu")
#: family -> module building its ops (``ops(capture, **options) -> list[Op]``, ``NUMERICS``: the
#: back-end it captures, ``OPTIONS``: the options it takes with their defaults).
FAMILIES = {
    "inflash": "sim.llm.cases.inflash",
    "flowkv": "sim.llm.cases.flowkv",
    "rdxe": "sim.llm.cases.rdxe",
    "edram": "sim.llm.cases.edram",
}
#: Where cases are kept (relative to the working directory unless ``MEMWALL_CASES`` is set).
CASE_FOLDER = Path("build") / "llm" / "cases"
_ENV_FOLDER = "MEMWALL_CASES"
#: Source folders whose code decides a case's arrays.
_SOURCES = ("sim/llm", "golden")
_ROOT = Path(__file__).resolve().parents[3]


class CaseError(ValueError):
    """A case that cannot be built (position past the text or the context, unknown family or
    layer); the message is one line."""


@dataclass(frozen=True)
class Call:
    """One hook call of the recorded layer: the hook's name, its arguments after ``layer``, and
    what it returned."""

    hook: str
    args: tuple
    result: object


@dataclass
class Capture:
    """A back-end's decode step at ``position`` (module notes): the calls of ``layer`` in order,
    the back-end (its state after the step: weights, tables, counters) and the KV cache (every
    layer's kept keys and values, positions ``0 .. position``)."""

    layer: int
    position: int
    ids: list
    numerics: object
    cache: object
    calls: list = field(default_factory=list)

    def find(self, hook: str, **match) -> list[Call]:
        """The calls of ``hook`` whose leading arguments equal ``match`` by name (``kind`` for
        ``keep``, ``name`` for ``project``, ``norm`` for ``norm``/``norm_project``)."""
        names = {"keep": ("kind", "x"), "project": ("name", "x"), "norm": ("h", "norm"),
                 "norm_project": ("h", "norm", "names"), "attention": ("q", "k", "v", "first"),
                 "glu": ("gate", "up")}[hook]
        found = []
        for c in self.calls:
            if c.hook != hook:
                continue
            bound = dict(zip(names, c.args))
            if all(_equal(bound.get(k), v) for k, v in match.items()):
                found.append(c)
        return found

    def one(self, hook: str, **match) -> Call:
        found = self.find(hook, **match)
        if len(found) != 1:
            raise CaseError(f"layer {self.layer}: expected one {hook} call with {match}, the "
                            f"back-end {self.numerics.name} made {len(found)}")
        return found[0]


def _equal(a, b) -> bool:
    return tuple(a) == tuple(b) if isinstance(b, (tuple, list)) else a == b


@dataclass(frozen=True)
class Op:
    """One operation of a case: its name (``attn_q``, ``logit.g0``...), the real shape in words,
    input and expected output arrays by name, and integers the RTL runner needs (``meta``)."""

    name: str
    shape: str
    inputs: dict
    expected: dict
    meta: dict = field(default_factory=dict)


def prompt_ids(mf, position: int, ids=None) -> list[int]:
    """The ``position + 1`` token ids of a case (the default text's unless ``ids`` given)."""
    if not isinstance(position, int) or position < 0:
        raise CaseError(f"position must be an integer >= 0, not {position!r}")
    if position >= mf.config.context:
        raise CaseError(f"position {position} is past the model's context "
                        f"(0 .. {mf.config.context - 1})")
    if ids is None:
        from ..score import default_text
        from ..tokenizer import tokenizer
        ids = tokenizer(mf).encode(default_text().text)
    ids = list(ids)
    if len(ids) < position + 1:
        raise CaseError(f"position {position} needs {position + 1} tokens; the prompt has "
                        f"{len(ids)}")
    return ids[:position + 1]


def check_layer(mf, layer: int) -> None:
    """:class:`CaseError` unless ``layer`` is one of the model's."""
    if not isinstance(layer, int) or not 0 <= layer < mf.config.layers:
        raise CaseError(f"layer must be from 0 to {mf.config.layers - 1}, not {layer!r}")


def capture(mf, numerics, ids, layer: int) -> Capture:
    """Run ``numerics`` over ``ids`` (module notes) and record ``layer``'s calls in the step of
    the last token."""
    from ..model import Llama
    check_layer(mf, layer)
    model = Llama(mf, numerics, layers=layer + 1)
    cache = model.new_cache()
    ids = list(ids)
    if len(ids) > 1:
        model.hidden(ids[:-1], cache)
    cap = Capture(layer, len(ids) - 1, ids, numerics, cache)
    originals = {hook: getattr(numerics, hook) for hook in HOOKS}

    def recorder(hook, method):
        def record(*args):
            out = method(*args)
            if hook == "norm":                 # norm(h, layer, norm): the layer comes second
                if args[1] == layer:
                    cap.calls.append(Call(hook, (args[0], args[2]), out))
            elif args[0] == layer:
                cap.calls.append(Call(hook, args[1:], out))
            return out
        return record

    for hook, method in originals.items():
        setattr(numerics, hook, recorder(hook, method))
    try:
        model.hidden(ids[-1:], cache)
    finally:
        for hook in HOOKS:                 # back to the class's methods
            delattr(numerics, hook)
    return cap


def _sources_sha256() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        for path in sorted((_ROOT / name).rglob("*.py")):
            digest.update(str(path.relative_to(_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


_FILE_SHA: dict = {}


def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _FILE_SHA:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _FILE_SHA[key] = digest.hexdigest()
    return _FILE_SHA[key]


def save_ops(path: Path, ops: list[Op], info: dict) -> None:
    """Write ``ops`` and ``info`` to ``path`` (npz; atomically)."""
    arrays = {"info": np.array(json.dumps(info))}
    index = []
    for i, op in enumerate(ops):
        index.append({"name": op.name, "shape": op.shape, "meta": op.meta,
                      "inputs": list(op.inputs), "expected": list(op.expected)})
        arrays.update({f"{i}.in.{k}": np.asarray(v) for k, v in op.inputs.items()})
        arrays.update({f"{i}.out.{k}": np.asarray(v) for k, v in op.expected.items()})
    arrays["index"] = np.array(json.dumps(index))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as f:
        np.savez(f, **arrays)
    os.replace(partial, path)


def load_ops(path: Path) -> tuple[list[Op], dict]:
    """The ops and info :func:`save_ops` wrote."""
    with np.load(path, allow_pickle=False) as z:
        index = json.loads(str(z["index"]))
        ops = [Op(e["name"], e["shape"], {k: z[f"{i}.in.{k}"] for k in e["inputs"]},
                  {k: z[f"{i}.out.{k}"] for k in e["expected"]}, e["meta"])
               for i, e in enumerate(index)]
        return ops, json.loads(str(z["info"]))


def check_family(family: str) -> None:
    """:class:`CaseError` unless real-model cases exist for ``family``."""
    if family not in FAMILIES:
        raise CaseError(f"unknown family {family!r}: real-model cases exist for "
                        f"{', '.join(FAMILIES)}")


def family_module(family: str):
    check_family(family)
    return importlib.import_module(FAMILIES[family])


def case(mf, family: str, layer: int, position: int, *, ids=None, folder: Path | None = None,
         **options) -> tuple[list[Op], Path]:
    """A family's ops at ``(layer, position)`` and the file holding them (module notes).

    ``options`` go to the family's module (:data:`FAMILIES`); unknown ones raise
    :class:`CaseError`.
    """
    check_layer(mf, layer)
    ids = prompt_ids(mf, position, ids)
    module = family_module(family)
    unknown = sorted(set(options) - set(module.OPTIONS))
    if unknown:
        raise CaseError(f"{family} cases take the options {', '.join(module.OPTIONS) or 'none'}, "
                        f"not {', '.join(unknown)}")
    options = {**module.OPTIONS, **options}
    key = {"model_sha256": _file_sha256(Path(mf.path)), "ids": ids, "family": family,
           "layer": layer, "position": position, "options": options,
           "sources_sha256": _sources_sha256()}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    folder = Path(os.environ.get(_ENV_FOLDER, CASE_FOLDER)) if folder is None else folder
    path = folder / f"{family}-L{layer}-T{position}-{digest[:16]}.npz"
    try:
        return load_ops(path)[0], path
    except (OSError, ValueError, KeyError):
        pass
    from ..backends import numerics
    cap = capture(mf, numerics(module.NUMERICS, mf), ids, layer)
    ops = module.ops(cap, **options)
    save_ops(path, ops, {k: v for k, v in key.items() if k != "ids"} | {"tokens": len(ids)})
    return ops, path
