"""KV-cache model of the in-flash PE: the page-level and naive mappings, the pages a sequence
occupies and reads, the page images a writer programs, entries read back from pages, and the
read-disturb counters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.inflash.spec import FlashGeometry
from hdl.validate import integer

from .params import ERASED, K, KV_FORMATS, MAPPINGS, MAX_TOKENS, V, _array, _choice, _pow2
from .weights import _from_le16, _le16

__all__ = [
    "KVLayout", "kv_address", "kv_table", "kv_page_count", "kv_page_sequence", "kv_pages_read",
    "kv_pages", "kv_read", "kv_entries", "KV_RECORD", "KVWrite", "kv_write", "block_reads",
]


# --- KV cache mapping -----------------------------------------------------------------------------


@dataclass(frozen=True)
class KVLayout:
    """Describe a KV cache and how its entries map to pages.

    Parameters
    ----------
    layers : int
        Decoder layers ``L`` (1 to 1024).
    kv_heads : int
        KV heads ``H`` per layer (1 to 1024); each serves a group of query heads (GQA) or one
        (MHA).
    head_dim : int
        Head dimension ``d`` (1 to 65536).
    kv_format : str
        ``fp16``, ``bf16`` or ``int8`` (the W8A8 setting's 8-bit KV).
    page_bytes : int
        Page size, a power of two from 16 to 65536; one entry (``d`` elements) must fit.
    mapping : str
        ``page`` (page-level: one page holds ``T_p`` consecutive tokens of one (layer, K|V,
        head)) or ``naive`` (entries in generation order, ``T_p`` per page).
    """

    layers: int
    kv_heads: int
    head_dim: int
    kv_format: str = "fp16"
    page_bytes: int = 4096
    mapping: str = "page"

    def __post_init__(self):
        integer(self.layers, "Layer count", 1, 1024)
        integer(self.kv_heads, "KV head count", 1, 1024)
        integer(self.head_dim, "Head dimension", 1, 1 << 16)
        _choice(self.kv_format, "KV format", KV_FORMATS)
        _pow2(self.page_bytes, "Page size in bytes", 16, 1 << 16)
        _choice(self.mapping, "KV mapping", MAPPINGS)
        if self.entry_bytes > self.page_bytes:
            raise ValueError(f"A KV entry (head dimension x element bytes) must fit in a page of "
                             f"{self.page_bytes} bytes, not {self.entry_bytes}")

    @property
    def element_bytes(self) -> int:
        return 1 if self.kv_format == "int8" else 2

    @property
    def entry_bytes(self) -> int:
        """Bytes of one entry: ``d * element_bytes``."""
        return self.head_dim * self.element_bytes

    @property
    def tokens_per_page(self) -> int:
        """Entries per page ``T_p = page_bytes // entry_bytes`` (tokens per page, page-level)."""
        return self.page_bytes // self.entry_bytes

    @property
    def entries_per_token(self) -> int:
        """Entries one token adds: ``S = 2 * L * H``."""
        return 2 * self.layers * self.kv_heads

    @property
    def buffer_bytes(self) -> int:
        """KV buffer the writer needs to fill whole pages: ``S * T_p * entry_bytes``
        (page-level: every (layer, K|V, head) holds up to a page) or ``T_p * entry_bytes``
        (naive: one page)."""
        per_page = self.tokens_per_page * self.entry_bytes
        return per_page * (self.entries_per_token if self.mapping == "page" else 1)

    def with_mapping(self, mapping: str) -> "KVLayout":
        """The same cache under another mapping."""
        return KVLayout(self.layers, self.kv_heads, self.head_dim, self.kv_format,
                        self.page_bytes, mapping)


def _kind(kind) -> np.ndarray:
    arr = np.asarray(kind)
    if arr.dtype.kind in "US":
        if not np.isin(arr, ["K", "V"]).all():
            bad = arr[~np.isin(arr, ["K", "V"])].flat[0]
            raise ValueError(f"Kind must be K or V (0 or 1), not {str(bad)!r}")
        return (arr == "V").astype(np.int64)
    return _range(arr, "Kind", 0, 1)


def _range(values, what: str, lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"{what} must be an integer between {lo} and {hi}, not {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        bad = int(arr.min()) if int(arr.min()) < lo else int(arr.max())
        raise ValueError(f"{what} must be between {lo} and {hi}, not {bad}")
    return arr


def kv_address(layout: KVLayout, layer, head, token, kind) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(page, offset)`` of KV entries (arrays broadcast; ``int64``).

    With ``c = (2 * layer + kind) * H + head`` (``kind`` 0 for K, 1 for V, or ``"K"``/``"V"``)
    and ``T_p`` entries per page:

    - page-level: ``page = (token // T_p) * S + c``, ``offset = (token % T_p) * entry_bytes``;
    - naive: ``e = token * S + c`` (generation order), ``page = e // T_p``,
      ``offset = (e % T_p) * entry_bytes``.

    ``S = 2 * L * H``. Entries never straddle pages; the last ``page_bytes - T_p *
    entry_bytes`` bytes of each page stay erased.
    """
    layer = _range(layer, "Layer", 0, layout.layers - 1)
    head = _range(head, "KV head", 0, layout.kv_heads - 1)
    token = _range(token, "Token", 0, MAX_TOKENS - 1)
    kind = _kind(kind)
    layer, head, token, kind = np.broadcast_arrays(layer, head, token, kind)
    tp, s = layout.tokens_per_page, layout.entries_per_token
    c = (2 * layer + kind) * layout.kv_heads + head
    if layout.mapping == "page":
        page, slot = (token // tp) * s + c, token % tp
    else:
        entry = token * s + c
        page, slot = entry // tp, entry % tp
    return page, slot * layout.entry_bytes


def _seq(seq_len) -> int:
    return integer(seq_len, "Sequence length", 1, MAX_TOKENS)


def kv_table(layout: KVLayout, seq_len: int) -> np.ndarray:
    """Return the mapping table of tokens ``0 .. seq_len - 1``: a structured array with fields
    ``layer, head, token, kind, page, offset`` (``int64``), one row per entry, in generation
    order (token, layer, kind, head)."""
    t = _seq(seq_len)
    token, layer, kind, head = np.meshgrid(np.arange(t), np.arange(layout.layers),
                                           np.arange(2), np.arange(layout.kv_heads),
                                           indexing="ij")
    page, offset = kv_address(layout, layer, head, token, kind)
    table = np.empty(token.size, dtype=[(n, np.int64) for n in
                                        ("layer", "head", "token", "kind", "page", "offset")])
    for name, value in (("layer", layer), ("head", head), ("token", token), ("kind", kind),
                        ("page", page), ("offset", offset)):
        table[name] = value.reshape(-1)
    return table


def kv_page_count(layout: KVLayout, seq_len: int) -> int:
    """Pages holding the cache of ``seq_len`` tokens (the last ones partly filled, by the
    flush at sequence end): ``ceil(T / T_p) * S`` (page-level), ``ceil(T * S / T_p)`` (naive)."""
    t, tp, s = _seq(seq_len), layout.tokens_per_page, layout.entries_per_token
    return -(-t // tp) * s if layout.mapping == "page" else -(-t * s // tp)


def kv_page_sequence(layout: KVLayout, seq_len: int, *, layer: int = 0, head: int = 0,
                     kind=K) -> np.ndarray:
    """Return the pages Logit (``kind`` K) or Attend (V) of one head group reads at sequence
    length ``seq_len``, in read order (token order), each once: ``int64``. All ``seq_len``
    tokens are in flash. Every query head of the group uses each page read."""
    t = _seq(seq_len)
    page, _ = kv_address(layout, layer, head, np.arange(t), kind)
    return np.unique(page)            # pages grow with the token: sorted order is read order


def kv_pages_read(layout: KVLayout, seq_len: int, *, layer: int = 0, head: int = 0,
                  kind=K) -> int:
    """Return the page reads of Logit (or Attend) of one head group at ``seq_len`` tokens.

    Page-level: ``ceil(T / T_p)``. Naive with ``S >= T_p``: ``T`` (every token on its own page);
    with ``S < T_p``: ``((T - 1) * S + c) // T_p - c // T_p + 1``, ``c = (2 * layer + kind) * H
    + head``. Equals ``len(kv_page_sequence(...))``.
    """
    t, tp, s = _seq(seq_len), layout.tokens_per_page, layout.entries_per_token
    layer = int(_range(layer, "Layer", 0, layout.layers - 1))
    head = int(_range(head, "KV head", 0, layout.kv_heads - 1))
    c = (2 * layer + int(_kind(kind))) * layout.kv_heads + head
    if layout.mapping == "page":
        return -(-t // tp)
    if s >= tp:
        return t
    return ((t - 1) * s + c) // tp - c // tp + 1


def _entry_bytes(codes: np.ndarray, kv_format: str) -> np.ndarray:
    if kv_format == "int8":
        return codes.astype(np.int8).view(np.uint8)
    return _le16(codes)


def kv_entries(layout: KVLayout, keys, values) -> tuple[int, np.ndarray]:
    """Check ``keys`` and ``values`` (``(T, L, H, d)`` codes); return ``T`` and the entries'
    bytes in generation order (token, layer, K then V, head), ``(T S, entry_bytes)`` ``uint8``:
    what the KV page writer takes."""
    k = _array(keys, "Keys", 4, "(tokens, layers, KV heads, head dimension)", layout.kv_format)
    v = _array(values, "Values", 4, "(tokens, layers, KV heads, head dimension)",
               layout.kv_format)
    want = (layout.layers, layout.kv_heads, layout.head_dim)
    for name, arr in (("Keys", k), ("Values", v)):
        if arr.shape[1:] != want:
            raise ValueError(f"{name} must have shape (tokens, {', '.join(map(str, want))}), "
                             f"not {arr.shape}")
    if k.shape != v.shape:
        raise ValueError(f"Values must have the keys' shape {k.shape}, not {v.shape}")
    t = _seq(k.shape[0])
    entries = np.stack([k, v], axis=2)                    # (T, L, 2, H, d): generation order
    return t, _entry_bytes(entries.reshape(-1, layout.head_dim), layout.kv_format).reshape(
        -1, layout.entry_bytes)


def _place(layout: KVLayout, table: np.ndarray, data: np.ndarray, n: int) -> np.ndarray:
    """Page images ``(n, page_bytes)`` holding the entries ``data`` at the slots of ``table``
    (rows of :func:`kv_table`); every other byte erased."""
    size = layout.page_bytes
    pages = np.full(n * size, ERASED, np.uint8)
    start = table["page"] * size + table["offset"]
    pages[start[:, None] + np.arange(layout.entry_bytes)[None, :]] = data
    return pages.reshape(n, size)


def kv_pages(layout: KVLayout, keys, values) -> np.ndarray:
    """Write a KV cache into page images (``np.uint8``, ``(kv_page_count, page_bytes)``).

    ``keys``, ``values``: codes of shape ``(T, L, H, d)`` (fp16/bf16 bit patterns or int8
    values). Each entry's elements are stored in order, 16-bit codes low byte first; unused bytes
    are :data:`ERASED`.
    """
    t, data = kv_entries(layout, keys, values)
    return _place(layout, kv_table(layout, t), data, kv_page_count(layout, t))


#: Fields of a record of the KV writer's mapping table (:class:`KVWrite`).
KV_RECORD = ("page", "layer", "kind", "head", "token", "entries")


@dataclass(frozen=True, eq=False)
class KVWrite:
    """What the KV page writer does with one sequence (:func:`kv_write`).

    Attributes
    ----------
    pages : np.ndarray
        Pages programmed (relative to the sequence's first page), in program order (``int64``).
    images : np.ndarray
        Their images, ``uint8 (len(pages), page_bytes)``.
    table : np.ndarray
        The mapping table, one record per page programmed (fields :data:`KV_RECORD`,
        ``int64``): the page, the (token, layer, kind, head) of its first entry in generation
        order and its entry count. Page-level: the (layer, kind, head) stream and its tokens
        ``token .. token + entries - 1``; naive: ``entries`` consecutive entries of the
        generation order.
    entries : int
        Entries stored (in generation order; a whole number of tokens unless the sequence
        ended inside one).
    error : str or None
        ``"buffer"``: the page-level mapping needs a page of buffer per (layer, K|V, head)
        stream, ``S = 2 L H`` of them, more than ``slots``: nothing is stored. ``"pages"``: a
        token's pages would pass the region (or the sequence :data:`MAX_TOKENS`): that token
        and every later one are dropped; everything before it is stored.
    """

    pages: np.ndarray
    images: np.ndarray
    table: np.ndarray
    entries: int
    error: str | None


def kv_write(layout: KVLayout, keys, values, *, pages: int, slots: int,
             entries: int | None = None) -> KVWrite:
    """Return what the KV page writer stores of one sequence (:class:`KVWrite`).

    The writer takes the entries in generation order (token, layer, K then V, head) and places
    each at :func:`kv_address`. It buffers whole pages: under the page-level mapping one page
    per stream ``c = (2 layer + kind) H + head`` (``S`` buffer pages, all filling together),
    under the naive mapping the page being filled. A page is programmed when its ``T_p``
    entries are in; at sequence end the flush programs the partly filled pages (unused bytes
    :data:`ERASED`). Pages are programmed in increasing page order, each once. A token is
    stored only if all its pages lie inside the region of ``pages`` pages (checked when its
    first entry arrives).

    Parameters
    ----------
    layout : KVLayout
    keys, values : array
        ``(T, L, H, d)`` codes, as :func:`kv_pages` takes them.
    pages : int
        Pages of the region the sequence may use (1 to 2**40).
    slots : int
        Pages of the writer's KV buffer (1 to 2**20).
    entries : int, optional
        Entries the host sends, the first ones of the generation order (default all ``T S``):
        a sequence may end inside a token.
    """
    t, data = kv_entries(layout, keys, values)
    pages = integer(pages, "Region pages", 1, 1 << 40)
    slots = integer(slots, "KV buffer pages", 1, 1 << 20)
    s = layout.entries_per_token
    sent = t * s if entries is None else integer(entries, "Entries sent", 0, t * s)
    empty = np.zeros(0, dtype=[(name, np.int64) for name in KV_RECORD])
    if layout.mapping == "page" and s > slots:
        return KVWrite(np.zeros(0, np.int64), np.zeros((0, layout.page_bytes), np.uint8),
                       empty, 0, "buffer")
    tokens = -(-sent // s)                                # tokens begun
    last, _ = kv_address(layout, layout.layers - 1, layout.kv_heads - 1,
                         np.arange(min(tokens, MAX_TOKENS)), V)
    fit = last < pages
    admitted = int(np.argmin(fit)) if not fit.all() else len(fit)
    stored = min(sent, admitted * s)
    error = "pages" if admitted < tokens else None
    if stored == 0:
        return KVWrite(np.zeros(0, np.int64), np.zeros((0, layout.page_bytes), np.uint8),
                       empty, 0, error)
    table = kv_table(layout, admitted)[:stored]           # generation order
    used, first, count = np.unique(table["page"], return_index=True, return_counts=True)
    images = _place(layout, table, data[:stored], int(used[-1]) + 1)[used]
    records = np.zeros(len(used), dtype=empty.dtype)
    records["page"], records["entries"] = used, count
    for name in ("layer", "kind", "head", "token"):
        records[name] = table[name][first]
    return KVWrite(used.astype(np.int64), images, records, stored, error)


def kv_read(layout: KVLayout, pages, layer: int, head: int, kind, seq_len: int) -> np.ndarray:
    """Read the K (``kind`` 0) or V (1) vectors of tokens ``0 .. seq_len - 1`` of one (layer,
    head) from page images; return ``(T, d)`` codes (``np.uint16`` or ``np.int8``)."""
    t = _seq(seq_len)
    arr = np.asarray(pages)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != layout.page_bytes:
        raise ValueError(f"Pages must be a (pages, {layout.page_bytes}) uint8 array, not "
                         f"{arr.dtype} of shape {arr.shape}")
    page, offset = kv_address(layout, layer, head, np.arange(t), kind)
    if int(page.max()) >= arr.shape[0]:
        raise ValueError(f"Page count must be at least {int(page.max()) + 1} for "
                         f"{t} tokens, not {arr.shape[0]}")
    flat = arr.reshape(-1)
    data = flat[(page * layout.page_bytes + offset)[:, None]
                + np.arange(layout.entry_bytes)[None, :]]
    if layout.kv_format == "int8":
        return data.view(np.int8)
    return _from_le16(data).reshape(t, layout.head_dim)


# --- read disturb ---------------------------------------------------------------------------------


def block_reads(geometry: FlashGeometry, pages_read) -> np.ndarray:
    """Count page reads per block: ``(blocks,)`` ``int64``, block ``b`` holding pages
    ``b * pages_per_block .. (b + 1) * pages_per_block - 1``. Every read of a page adds one to
    its block's counter (read disturb stresses the whole block)."""
    pages = _range(np.asarray(pages_read).reshape(-1), "Page", 0, geometry.pages - 1)
    return np.bincount(pages // geometry.pages_per_block, minlength=geometry.blocks)
