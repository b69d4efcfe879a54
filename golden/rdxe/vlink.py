"""Query heads and KV groups placed on a DXE's DXTs, the VLINK reads that GQA then needs, and the
KV cache capacity that VLINK saves (docs/rdxe.md, section 15).

The rDXE paper splits attention heads across the DXTs and "VLINK enables GQA by reconfiguring
KV$ across DXTs, allowing KV sharing across attention heads" (Sec. III-C): a KV group's keys and
values are stored once, in one DXT, and query heads of that group placed in other DXTs read them
over VLINK. Without it, every DXT holding a query head of a group would keep its own copy.

Placement (:func:`place`): query heads in order, in contiguous runs as equal as the counts allow
(DXT ``j`` takes heads ``floor(j H / D)`` to ``floor((j + 1) H / D) - 1``; a DXT may hold none
when ``D > H``); a KV group's home is the DXT of its first query head. memwall's DXE
(:func:`dxe_layout`) runs each head's attention on its group's home instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from hdl.validate import integer

__all__ = ["Placement", "place", "dxe_layout"]


@dataclass(frozen=True)
class Placement:
    """Where ``heads`` query heads of ``kv_heads`` KV groups sit on ``dxts`` DXTs.

    ``head_dxt[h]``: the DXT of query head ``h``; ``home[g]``: the DXT that stores group ``g``'s
    cache; ``reads``: the VLINK reads, ``(h, home, dxt)`` for each head whose group lives in
    another DXT.
    """

    heads: int
    kv_heads: int
    dxts: int
    head_dxt: tuple[int, ...]
    home: tuple[int, ...]

    @property
    def group_size(self) -> int:
        return self.heads // self.kv_heads

    @property
    def reads(self) -> tuple[tuple[int, int, int], ...]:
        g = self.group_size
        return tuple((h, self.home[h // g], d) for h, d in enumerate(self.head_dxt)
                     if d != self.home[h // g])

    def copies(self, vlink: bool = True) -> int:
        """KV group caches stored: one per group with VLINK; without it, one per group in every
        DXT that holds a query head of it."""
        if vlink:
            return self.kv_heads
        g = self.group_size
        return len({(h // g, d) for h, d in enumerate(self.head_dxt)})

    def bytes_per_token(self, head_dim: int, vlink: bool = True) -> int:
        """INT8 key and value bytes stored per token of context."""
        return 2 * head_dim * self.copies(vlink)


def place(heads: int, kv_heads: int, dxts: int) -> Placement:
    """Place ``heads`` query heads of ``kv_heads`` KV groups on ``dxts`` DXTs (module notes).

    Raises
    ------
    TypeError, ValueError
        A count that is not a positive integer, or ``heads`` not a multiple of ``kv_heads``.
    """
    heads = integer(heads, "Query heads", 1, 4096)
    kv_heads = integer(kv_heads, "KV heads", 1, heads)
    dxts = integer(dxts, "DXTs", 1, 64)
    if heads % kv_heads:
        raise ValueError(f"Query heads must be a multiple of the KV heads ({kv_heads}), "
                         f"not {heads}")
    head_dxt = tuple(next(j for j in range(dxts) if h < (j + 1) * heads // dxts)
                     for h in range(heads))
    g = heads // kv_heads
    return Placement(heads, kv_heads, dxts, head_dxt, tuple(head_dxt[k * g]
                                                             for k in range(kv_heads)))


def dxe_layout(heads: int, kv_heads: int, dxts: int, dxt_groups: int, group_size: int
               ) -> Placement:
    """Where a layer of ``heads`` query heads in ``kv_heads`` KV groups attends on a DXE of
    ``dxts`` DXTs (``hdl.rdxe.dxtside.DxtSide`` with ``dxts``, docs/rdxe.md 15 and 16.5), each
    DXT holding ``dxt_groups`` groups of ``group_size`` heads: group ``g``'s cache in DXT ``g //
    dxt_groups`` (its home, the DXTs filled in order), and every query head's Q.K^T and P.V on
    its group's home. So each group's cache is stored once (``copies()`` is ``kv_heads``), what
    VLINK gives the paper's split (:func:`place`, whose ``copies(vlink=False)`` is the split
    without it); the query of a head that :func:`place` puts on another DXT reaches the home
    through the rr-SRAM. A layer may use fewer groups than the DXE holds.

    Raises
    ------
    ValueError
        A layer whose group size is not the DXTs', or whose groups do not fit them; what
        :func:`place` raises.
    """
    paper = place(heads, kv_heads, dxts)
    dxt_groups = integer(dxt_groups, "KV groups a DXT", 1, 4096)
    if paper.group_size != group_size:
        raise ValueError(f"A layer of {heads} query heads in {kv_heads} KV groups has groups of "
                         f"{paper.group_size}; the DXE's DXTs hold groups of {group_size}")
    if kv_heads > dxts * dxt_groups:
        raise ValueError(f"A layer of {kv_heads} KV groups does not fit {dxts} DXTs of "
                         f"{dxt_groups} groups ({dxts * dxt_groups} in all)")
    home = tuple(g // dxt_groups for g in range(kv_heads))
    return Placement(heads, kv_heads, dxts, tuple(home[h // group_size] for h in range(heads)),
                     home)
