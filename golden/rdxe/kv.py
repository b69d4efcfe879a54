"""KV-cache layout model of the rDXE tile: GQA groups, the iWuR and baseline byte addresses,
capacity, and the storage image a sequence of token writes leaves in the VACs' caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.validate import integer

from .params import DxtConfig, _int8, _layout, _params

__all__ = [
    "KVImage", "kv_groups", "kv_address", "kv_capacity", "kv_image", "kv_read",
]


# --- KV cache: GQA, iWuR and baseline layouts -----------------------------------------------------


def kv_groups(heads: int, group_size: int) -> np.ndarray:
    """Return the KV group of each query head: ``h // group_size`` (int64, shape ``(heads,)``).

    Raises
    ------
    ValueError
        ``heads`` not a multiple of ``group_size`` (or either out of range).
    """
    group_size = integer(group_size, "GQA group size", 1, 64)
    heads = integer(heads, "Query head count", 1, 4096)
    if heads % group_size:
        raise ValueError(f"Query head count must be a multiple of the GQA group size "
                         f"{group_size}, not {heads}")
    return np.arange(heads, dtype=np.int64) // group_size


def kv_address(kind: str, token, channel, params: DxtConfig, layout: str = "iwur",
               group: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(vac, row, col)`` of byte ``channel`` of token ``token``'s key (``kind="k"``) or
    value (``"v"``) in KV group ``group``; arrays broadcast. Rows count from ``group *
    group_rows`` for K and from ``kv_rows / 2 + group * group_rows`` for V (below: ``group``
    0).

    iWuR: key of token ``t`` in VAC ``t mod N``, slot ``j = t // N``, row ``j * (d / lanes) +
    i // lanes``, column ``i mod lanes`` (one key per ``d / lanes`` rows); value channel ``e`` in
    VAC ``e mod N``, ``u = e // N``, row ``(t // lanes) * ceil(d / N) + u``, column ``t mod lanes``
    (a row holds ``lanes`` tokens of one channel). Baseline: the same VACs; key row
    ``(j // lanes) * d + i``, column ``j mod lanes`` (a row holds one channel of ``lanes`` slots);
    value row ``t * ceil(ceil(d / N) / lanes) + u // lanes``, column ``u mod lanes`` (a row holds
    one token's channels of that VAC).
    """
    params = _params(params)
    layout = _layout(layout)
    if kind not in ("k", "v"):
        raise ValueError(f"KV kind must be 'k' or 'v', not {kind!r}")
    group = integer(group, "KV group", 0, params.kv_groups - 1)
    t, ch = np.broadcast_arrays(np.asarray(token, np.int64), np.asarray(channel, np.int64))
    N, L, d, c = params.vacs, params.lanes, params.head_dim, params.value_rows
    offset = group * params.group_rows
    if kind == "k":
        vac, slot = t % N, t // N
        if layout == "iwur":
            return vac, offset + slot * params.key_rows + ch // L, ch % L
        return vac, offset + (slot // L) * d + ch, slot % L
    vac, u, base = ch % N, ch // N, params.half_rows + offset
    if layout == "iwur":
        return vac, base + (t // L) * c + u, t % L
    per_token = -(-c // L)
    return vac, base + t * per_token + u // L, u % L


def kv_capacity(params: DxtConfig, layout: str = "iwur") -> int:
    """Return the tokens one KV group's caches hold: the first token whose key or value would
    fall past its half of a cache.

    iWuR: ``min(N * (group_rows // (d/lanes)), lanes * (group_rows // ceil(d/N)))``. Baseline:
    ``min(N * lanes * (group_rows // d), group_rows // ceil(ceil(d/N) / lanes))``
    (``group_rows = kv_rows / 2`` with one KV group).
    """
    params = _params(params)
    layout = _layout(layout)
    N, L, d, c, half = params.vacs, params.lanes, params.head_dim, params.value_rows, \
        params.group_rows
    if layout == "iwur":
        return params.kv.capacity
    return min(N * L * (half // d), half // -(-c // L))


@dataclass(frozen=True)
class KVImage:
    """Storage image of one KV group's caches after a sequence of writes.

    Attributes
    ----------
    data : np.ndarray
        ``(N, kv_rows, lanes)`` int8: every VAC's cache; bytes never written are 0.
    written : np.ndarray
        ``(N, kv_rows, lanes)`` bool: the bytes some write stored.
    responses : np.ndarray
        ``(writes,)`` bool: True (OKAY) for a stored token, False (ERROR) for a write past
        capacity, which stores nothing.
    tokens : int
        Tokens stored (the write pointer).
    layout : str
    """

    data: np.ndarray
    written: np.ndarray
    responses: np.ndarray
    tokens: int
    layout: str
    group: int = 0


def kv_image(K, V, params: DxtConfig, layout: str = "iwur", group: int = 0) -> KVImage:
    """Write tokens ``0, 1, ...`` (rows of ``K`` and ``V``, ``(T, d)`` INT8) in order into KV
    group ``group`` of the caches and return the storage image (the other groups' rows 0).

    iWuR write protocol (the image does not depend on its timing): the key bytes of token ``t``
    are broadcast over the GBUS, ``GBUS_BYTES`` channels per transfer (channel ``i`` driven by its
    producer, VAC ``i mod N``), and VAC ``t mod N`` stores each transfer with byte enables into
    one row; value channel ``e`` is written by its producer VAC ``e mod N`` into its own cache, one
    byte (one column) per row. A write at or past :func:`kv_capacity` is answered ERROR and
    changes nothing; later writes are answered ERROR too (the write pointer does not move).
    """
    params = _params(params)
    layout = _layout(layout)
    K = _int8(K, "Keys", 2, "(tokens, head dimension)")
    V = _int8(V, "Values", 2, "(tokens, head dimension)")
    d = params.head_dim
    if K.shape[1] != d:
        raise ValueError(f"Keys must have {d} channels (the head dimension), not {K.shape[1]}")
    if V.shape != K.shape:
        raise ValueError(f"Values must have the keys' shape {K.shape}, not {V.shape}")
    writes = K.shape[0]
    stored = min(writes, kv_capacity(params, layout))
    data = np.zeros((params.vacs, params.kv_rows, params.lanes), np.int8)
    written = np.zeros(data.shape, bool)
    t, ch = np.meshgrid(np.arange(stored), np.arange(d), indexing="ij")
    for kind, src in (("k", K), ("v", V)):
        vac, row, col = kv_address(kind, t, ch, params, layout, group)
        data[vac, row, col] = src[:stored]
        written[vac, row, col] = True
    return KVImage(data, written, np.arange(writes) < stored, stored, layout, group)


def kv_read(image: KVImage, params: DxtConfig) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(K, V)`` (``(tokens, d)`` int64) read back from ``image`` through the address map
    of its layout."""
    params = _params(params)
    t, ch = np.meshgrid(np.arange(image.tokens), np.arange(params.head_dim), indexing="ij")
    out = []
    for kind in ("k", "v"):
        vac, row, col = kv_address(kind, t, ch, params, image.layout, image.group)
        out.append(image.data[vac, row, col].astype(np.int64))
    return out[0], out[1]
