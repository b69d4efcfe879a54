"""The FlowKV tile pair (tile 0 and tile 1 joined by the item stream) and the array of pairs."""

from __future__ import annotations

from amaranth import Cat, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer
from .spec import FlowKVConfig, beat_layout, command_layout, output_layout
from .tile0 import ScoreTile
from .tile1 import ValueTile

__all__ = ["FlowKVPair", "FlowKVArray", "MAX_PAIRS"]

#: Largest number of pairs (KV heads) in an array.
MAX_PAIRS = 16


class FlowKVPair(wiring.Component):
    """Decode attention for one KV head and its ``G`` query heads on two tiles.

    Tile 0 (:class:`~hdl.flowkv.tile0.ScoreTile`) takes the command, the queries and the key
    rows; tile 1 (:class:`~hdl.flowkv.tile1.ValueTile`) takes the value rows and produces ``O``.
    They are joined by the item stream, double-buffered by chunk on both sides, so that in
    steady state tile 0 works on chunk ``c + 1`` while tile 1 accumulates chunk ``c``.

    Parameters
    ----------
    head_dim, lanes, group, chunk, max_tokens, out_fmt
        See :class:`~hdl.flowkv.spec.FlowKVConfig`.

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        One decode step: ``position``, ``length``, ``window``, ``sliding``.
    q : In(stream.Signature(beat_layout(cfg)))
        The step's ``G`` query rows, ``d / P`` beats each, head 0 first.
    k, v : In(stream.Signature(beat_layout(cfg)))
        The key and value rows of every chunk the sweep visits, in position order.
    o : Out(stream.Signature(output_layout(cfg)))
        ``O`` for each head, ``d / P`` beats per head; one ``error`` beat for a refused step.

    The numerics are those of :func:`golden.flowkv.attend` bit for bit; docs/flowkv.md gives
    the protocol, the timing and the measured rates.
    """

    def __init__(self, *, head_dim: int, lanes: int, group: int, chunk: int, max_tokens: int,
                 out_fmt="bf16"):
        self.cfg = cfg = FlowKVConfig(head_dim=head_dim, lanes=lanes, group=group, chunk=chunk,
                                      max_tokens=max_tokens, out_fmt=out_fmt)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "q": In(stream.Signature(beat_layout(cfg))),
            "k": In(stream.Signature(beat_layout(cfg))),
            "v": In(stream.Signature(beat_layout(cfg))),
            "o": Out(stream.Signature(output_layout(cfg))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tile0 = tile0 = ScoreTile(self.cfg)
        m.submodules.tile1 = tile1 = ValueTile(self.cfg)
        wiring.connect(m, tile0.items, tile1.items)
        for name in ("cmd", "q", "k"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(tile0, name))
        wiring.connect(m, wiring.flipped(self.v), tile1.v)
        wiring.connect(m, tile1.o, wiring.flipped(self.o))
        return m


class FlowKVArray(wiring.Component):
    """One FlowKV pair per KV head, as the paper maps four pairs onto eight compute tiles.

    Parameters
    ----------
    pairs : int
        KV heads, 1 to 16.
    head_dim, lanes, group, chunk, max_tokens, out_fmt
        Of every pair (:class:`FlowKVPair`).

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        One decode step for all heads of the layer: taken when every pair takes it.
    q<n>, k<n>, v<n> : In(stream.Signature(beat_layout(cfg)))
        Pair ``n``'s queries, keys and values (its own DMA channels).
    o<n> : Out(stream.Signature(output_layout(cfg)))
        Pair ``n``'s output.
    """

    def __init__(self, *, pairs: int, head_dim: int, lanes: int, group: int, chunk: int,
                 max_tokens: int, out_fmt="bf16"):
        self.pairs = integer(pairs, "Pair count (KV heads)", 1, MAX_PAIRS)
        self.cfg = cfg = FlowKVConfig(head_dim=head_dim, lanes=lanes, group=group, chunk=chunk,
                                      max_tokens=max_tokens, out_fmt=out_fmt)
        members = {"cmd": In(stream.Signature(command_layout(cfg)))}
        for n in range(pairs):
            for name in ("q", "k", "v"):
                members[f"{name}{n}"] = In(stream.Signature(beat_layout(cfg)))
            members[f"o{n}"] = Out(stream.Signature(output_layout(cfg)))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        units = []
        for n in range(self.pairs):
            pair = FlowKVPair(**self.cfg.kwargs())
            m.submodules[f"pair{n}"] = pair
            units.append(pair)
            for name in ("q", "k", "v"):
                wiring.connect(m, wiring.flipped(getattr(self, f"{name}{n}")),
                               getattr(pair, name))
            wiring.connect(m, pair.o, wiring.flipped(getattr(self, f"o{n}")))
        # Broadcast: every pair sees the command, and it is taken when all are ready at once.
        all_ready = Cat(pair.cmd.ready for pair in units).all()
        m.d.comb += self.cmd.ready.eq(all_ready)
        for pair in units:
            m.d.comb += [pair.cmd.valid.eq(self.cmd.valid & all_ready),
                         pair.cmd.payload.eq(self.cmd.payload)]
        return m
