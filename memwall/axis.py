"""AMBA AXI4-Stream port names around a block: ``memwall generate BLOCK --interface axis``.

:class:`AxisWrapper` is a component that instantiates a block's component and renames each of its
streams (``<s>__valid/__ready/__payload``, found as the manifest finds them,
:func:`memwall.manifest.streams`) to AXI4-Stream signals. The contract (docs/integration.md,
"AXI4-Stream"):

- A sink stream ``s`` of the block becomes ``s_axis_<s>_tdata/_tvalid/_tready/_tlast`` (inputs
  but ``tready``); a source stream ``s`` becomes ``m_axis_<s>_...`` (outputs but ``tready``).
- ``tdata`` is the whole payload zero-extended to a multiple of 8 bits: the manifest's field
  offsets apply to ``tdata`` unchanged, and the padding bits of a sink's ``tdata`` are ignored.
- A stream whose payload has a top-level 1-bit field ``last`` has ``tlast``: on a source it is a
  copy of ``payload.last``; on a sink it drives ``payload.last``, and the copy of that bit in
  ``tdata`` is ignored. Other streams have no ``tlast`` (every beat ends a frame).
- An always-ready (valid-only) stream has no ``tready``: AXI4-Stream's default for an absent
  ``TREADY`` is high, i.e. a sink that takes every beat, and a master of such a source must
  never stall it (it cannot).
- Every other port (status outputs, memory bank ports) passes through under its own name;
  ``clk`` and ``rst`` stay.

The wrapper adds no register and no logic beyond wiring: latency and throughput are the block's.
"""

from __future__ import annotations

from amaranth import Const, Module, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .manifest import streams as find_streams
from .registry import ports as block_ports

__all__ = ["INTERFACES", "AxisWrapper", "axis_streams", "tdata_width"]

#: The values of ``memwall generate --interface`` (``native``: the block's own stream names).
INTERFACES = ("native", "axis")
#: The payload field that a stream's ``tlast`` carries.
LAST_FIELD = "last"
_BYTE = 8


def tdata_width(payload_width: int) -> int:
    """Width of ``tdata`` for a payload of ``payload_width`` bits: whole bytes, at least one."""
    return max(_BYTE, -(-payload_width // _BYTE) * _BYTE)


def axis_streams(component: wiring.Component) -> list[dict]:
    """Describe the AXI4-Stream form of each stream of ``component``: the manifest's stream
    entry (:func:`memwall.manifest.streams`) with ``ports`` holding the AXI port names,
    ``tdata_width`` and ``tlast_field`` (the payload field ``tlast`` carries, or ``None``)."""
    found, _ = find_streams(block_ports(component))
    result = []
    for stream in found:
        prefix = ("s_axis_" if stream["direction"] == "sink" else "m_axis_") + stream["name"]
        has_last = any(f["name"] == LAST_FIELD and f["width"] == 1 for f in stream["fields"])
        ports = {"tdata": f"{prefix}_tdata", "tvalid": f"{prefix}_tvalid"}
        if stream["protocol"] == "valid-ready":
            ports["tready"] = f"{prefix}_tready"
        if has_last:
            ports["tlast"] = f"{prefix}_tlast"
        result.append({**stream, "native_ports": stream["ports"], "ports": ports,
                       "tdata_width": tdata_width(stream["payload_width"]),
                       "tlast_field": LAST_FIELD if has_last else None})
    return result


def _member(component, path):
    """The value of the flattened member at ``path`` (a tuple of names and indices)."""
    value = component
    for part in path:
        value = value[part] if isinstance(part, int) else getattr(value, part)
    return value


class AxisWrapper(wiring.Component):
    """Give a block's streams AMBA AXI4-Stream names (the contract is this module's docstring).

    Parameters
    ----------
    block : wiring.Component
        The block's component; it becomes the submodule ``block``.

    Members
    -------
    s_axis_<s>_tdata, _tvalid, _tready, _tlast : per sink stream ``s`` of the block
    m_axis_<s>_tdata, _tvalid, _tready, _tlast : per source stream ``s`` of the block
    <other> : each port of the block in no stream, under its own name

    Latency and throughput are the block's: the wrapper is wiring only.
    """

    def __init__(self, block: wiring.Component):
        if not isinstance(block, wiring.Component):
            raise TypeError(f"AxisWrapper takes a wiring.Component, not {block!r}")
        self.block = block
        self.streams = axis_streams(block)
        in_stream = {p for s in self.streams for p in s["native_ports"].values()}
        members = {}
        for s in self.streams:
            sink = s["direction"] == "sink"
            data_in, data_out = (In, Out) if sink else (Out, In)
            members[s["ports"]["tdata"]] = data_in(s["tdata_width"])
            members[s["ports"]["tvalid"]] = data_in(1)
            if "tready" in s["ports"]:
                members[s["ports"]["tready"]] = data_out(1)
            if "tlast" in s["ports"]:
                members[s["ports"]["tlast"]] = data_in(1)
        self._through, self._paths = {}, {}
        for path, member, value in block.signature.flatten(block):
            name = "__".join(str(p) for p in path)
            self._paths[name] = path
            if name in in_stream or isinstance(Value.cast(value), Const):
                continue
            self._through[name] = path
            members[name] = member
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        for s in self.streams:
            native = {role: _member(block, self._paths[name]) for role, name
                      in s["native_ports"].items()}
            axis = {role: getattr(self, name) for role, name in s["ports"].items()}
            payload = native.get("payload")
            width = Value.cast(payload).shape().width if payload is not None else 0
            if s["direction"] == "sink":
                m.d.comb += native["valid"].eq(axis["tvalid"])
                if width:
                    m.d.comb += Value.cast(payload).eq(axis["tdata"][:width])
                if "tready" in axis:
                    m.d.comb += axis["tready"].eq(native["ready"])
                if "tlast" in axis:     # after the tdata copy: tlast wins over its bit in tdata
                    m.d.comb += payload[LAST_FIELD].eq(axis["tlast"])
            else:
                m.d.comb += axis["tvalid"].eq(native["valid"])
                if width:
                    m.d.comb += axis["tdata"].eq(Value.cast(payload))
                if "tready" in axis:
                    m.d.comb += native["ready"].eq(axis["tready"])
                if "tlast" in axis:
                    m.d.comb += axis["tlast"].eq(payload[LAST_FIELD])
        for name, path in self._through.items():
            inner, outer = _member(block, path), getattr(self, name)
            flow = self.signature.members[name].flow
            m.d.comb += (inner.eq(outer) if flow == In else outer.eq(inner))
        return m
