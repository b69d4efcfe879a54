"""Run the plain SystemVerilog testbench (tb.sv) around a generated arith-fpmul under Icarus
Verilog and Verilator, as a user's own flow would: `make example`.

Steps: `memwall generate arith-fpmul` into build/example/fpmul; the vectors from the golden model
(golden.arith.float.fmul on corner codes and random operands), packed as the manifest's payload
fields say; then `iverilog` + `vvp` in SystemVerilog mode (-g2012, Icarus' default) and in
Verilog-2005 mode (-g2005), and `verilator --binary`. Exit status 0 when every run prints PASS; 1
otherwise, with the simulator's words.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from golden.arith import float as gf        # noqa: E402 - after the path set-up
from hdl.arith.format import float_format    # noqa: E402
from memwall.cli import main as memwall      # noqa: E402
from synth.toolchain import verilator_env     # noqa: E402

#: Random operand pairs besides every pair of corner codes.
RANDOM_PAIRS = 2000
SEED = 20261127


def vectors(manifest: dict, out: Path) -> int:
    """Write inputs.hex, expected.hex and vectors.vh for the block in ``manifest``; return N."""
    params = manifest["parameters"]
    fmts = {name: float_format(params[f"{name}_fmt"]) for name in ("a", "b", "out")}
    rng = np.random.default_rng(SEED)
    a, b = gf.operand_pairs(rng, fmts["a"], fmts["b"], RANDOM_PAIRS)
    y = gf.fmul(a, b, fmts["a"], fmts["b"], fmts["out"])
    sink = next(s for s in manifest["streams"] if s["direction"] == "sink")
    source = next(s for s in manifest["streams"] if s["direction"] == "source")
    fields = {f["name"]: f["offset"] for f in sink["fields"]}
    packed = [(int(x) << fields["a"]) | (int(z) << fields["b"]) for x, z in zip(a, b)]
    digits_in, digits_out = -(-sink["payload_width"] // 4), -(-source["payload_width"] // 4)
    (out / "inputs.hex").write_text("".join(f"{v:0{digits_in}x}\n" for v in packed))
    (out / "expected.hex").write_text("".join(f"{int(v):0{digits_out}x}\n" for v in y))
    (out / "vectors.vh").write_text(
        f"`define N {len(packed)}\n`define IN_W {sink['payload_width']}\n"
        f"`define OUT_W {source['payload_width']}\n"
        f"`define RESET_CYCLES {manifest['reset']['cycles'] + 1}\n")
    return len(packed)


#: Runs by --simulator: Icarus in its two language modes, Verilator.
RUNS = {"icarus": ("icarus -g2012", "icarus -g2005"), "verilator": ("verilator",)}


def simulate(run: str, out: Path, top: str) -> tuple[bool, str]:
    """Build and run tb.sv with the block in ``run`` (a :data:`RUNS` entry); return (passed, its
    output)."""
    sources = [str(HERE / "tb.sv"), str(out / f"{top}.v")]
    env = verilator_env()
    if run.startswith("icarus"):
        steps = [["iverilog", run.split()[1], f"-I{out}", "-o", str(out / "tb.vvp"), *sources],
                 ["vvp", "-n", str(out / "tb.vvp")]]
    else:
        # The waiver file from `memwall generate` first; -fcoroutines: this g++ needs it for
        # --binary's timing support.
        steps = [["verilator", "--binary", "-CFLAGS", "-fcoroutines", f"-I{out}",
                  "--top-module", "tb", "-Mdir", str(out / "obj_dir"), "-o", "tb",
                  str(out / f"{top}.vlt"), *sources],
                 [str(out / "obj_dir" / "tb")]]
    text = ""
    for argv in steps:
        done = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True)
        text += done.stdout + done.stderr
        if done.returncode != 0:
            return False, text
    return "PASS:" in text and "FAIL" not in text, text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", choices=("icarus", "verilator", "both"), default="both")
    parser.add_argument("-o", "--output", default=str(ROOT / "build" / "example" / "fpmul"))
    args = parser.parse_args(argv)
    out = Path(args.output)
    shutil.rmtree(out, ignore_errors=True)
    if memwall(["generate", "arith-fpmul", "-o", str(out)]) != 0:
        return 1
    manifest = json.loads((out / "arith_fpmul.json").read_text())
    n = vectors(manifest, out)
    print(f"{n} vectors from golden.arith.float.fmul in {out}")
    failed = []
    simulators = ("icarus", "verilator") if args.simulator == "both" else (args.simulator,)
    for run in (run for simulator in simulators for run in RUNS[simulator]):
        passed, text = simulate(run, out, manifest["top"])
        lines = [line for line in text.splitlines() if "PASS" in line or "FAIL" in line]
        print(f"{run}: " + ("; ".join(lines) if lines else "no verdict"))
        if not passed:
            failed.append(run)
            print(text[-2000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
