"""The KV page writer's side of the in-flash testbenches: the host's entry stream, and the
check of what the writer did with a sequence against ``golden.inflash.kv_write``.

Shared by the cocotb testbench (``cocotb_tests/inflash/tb.py``) and the in-process tests
(``tests/test_inflash_hdl.py``).
"""

from __future__ import annotations

import numpy as np

from golden import inflash as golden
from hdl.inflash.spec import Mapping, Mode, WriteError

__all__ = ["KV_MODES", "kv_words", "kv_command", "entries_of", "check_kv_write"]

#: ``Mode`` codes of the KV formats.
KV_MODES = {"fp16": Mode.FP16, "bf16": Mode.BF16, "int8": Mode.W8A8}
#: The writer's status code of each golden outcome.
_ERRORS = {None: WriteError.NONE, "buffer": WriteError.BUFFER, "pages": WriteError.PAGES}
#: Bytes of an entry's last word past the entry: the writer must ignore them.
_FILLER = 0xA5


def kv_words(layout: golden.KVLayout, keys, values, W: int, *, entries: int | None = None,
             cut: int = 0) -> list[dict]:
    """The ``kv`` words of a sequence: the first ``entries`` entries of the generation order
    (default all), each in ``ceil(e / W)`` words, then ``cut`` bytes of the next entry (a
    sequence ending inside an entry); ``last`` on the final word."""
    _, data = golden.kv_entries(layout, keys, values)
    n = len(data) if entries is None else entries
    e = layout.entry_bytes
    per_entry = -(-e // W)
    chunks = []
    for row in data[:n]:
        padded = np.full(per_entry * W, _FILLER, np.uint8)
        padded[:e] = row
        chunks += [padded[k * W:(k + 1) * W] for k in range(per_entry)]
    if cut:
        part = np.full(-(-cut // W) * W, _FILLER, np.uint8)
        part[:cut] = data[n][:cut]
        chunks += [part[k * W:(k + 1) * W] for k in range(len(part) // W)]
    return [{"data": [int(b) for b in chunk], "last": int(i == len(chunks) - 1)}
            for i, chunk in enumerate(chunks)]


def kv_command(layout: golden.KVLayout, page: int, pages: int) -> dict:
    """The writer's command for a sequence in ``layout`` on pages ``page .. page + pages - 1``."""
    return {"mode": KV_MODES[layout.kv_format], "mapping": Mapping[layout.mapping.upper()],
            "layers": layout.layers, "kv_heads": layout.kv_heads, "head_dim": layout.head_dim,
            "page": page, "pages": pages}


def entries_of(layout: golden.KVLayout, words: list[dict], W: int):
    """The whole entries a sequence's ``kv`` words hold (what the writer took), as ``(keys,
    values, entries)``: ``(T, L, H, d)`` codes of the tokens begun (the rest of a token 0) and
    the number of whole entries."""
    stream = np.array([b for w in words for b in w["data"]], np.uint8)
    e = layout.entry_bytes
    per_entry = -(-e // W) * W
    n = len(stream) // per_entry
    S, d = layout.entries_per_token, layout.head_dim
    tokens = max(1, -(-n // S))
    raw = np.zeros((tokens * S, e), np.uint8)
    raw[:n] = stream[:n * per_entry].reshape(n, per_entry)[:, :e]
    if layout.kv_format == "int8":
        codes = raw.view(np.int8).astype(np.int64)
    else:
        codes = raw.view("<u2").astype(np.int64)
    codes = codes.reshape(tokens, layout.layers, 2, layout.kv_heads, d)
    return codes[:, :, 0], codes[:, :, 1], n


def check_kv_write(want: golden.KVWrite, base: int, *, programs: list[int],
                   images: list[np.ndarray] | None, records: list[dict], status: dict,
                   where: str = "") -> None:
    """Compare what the writer did with one sequence with the golden: the pages programmed
    (in order), their images (if given: what the plane stored), the mapping-table records and
    the status."""
    pages = [base + int(p) for p in want.pages]
    assert programs == pages, f"{where}pages programmed {programs}, expected {pages}"
    if images is not None:
        for page, got, image in zip(pages, images, want.images):
            bad = np.flatnonzero(np.asarray(got, np.uint8) != image)
            assert not len(bad), (f"{where}page {page}: byte {bad[0]} is {int(got[bad[0]]):#04x}, "
                                  f"expected {int(image[bad[0]]):#04x}")
    expected = [{**{name: int(rec[name]) for name in golden.KV_RECORD}, "page": base + int(p)}
                for rec, p in zip(want.table, want.pages)]
    got = [{name: int(rec[name]) for name in golden.KV_RECORD} for rec in records]
    assert got == expected, f"{where}mapping table {got}, expected {expected}"
    assert (status["entries"], status["error"]) == (want.entries, _ERRORS[want.error]), \
        f"{where}status {status}, expected {want.entries} entries, error {want.error}"
