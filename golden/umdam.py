"""Bit-exact NumPy model of the UMDAM address mapper, composer and tile layout (Algorithm 1).

The model takes the validated descriptions of :mod:`hdl.umdam.geometry` (a geometry and mappings)
as parameters and computes everything from the specification:

* a mapping reads each field's bits out of the physical address, MSB to LSB in the order the mapping
  lists them; a field written ``bank^row`` is XORed with the low bits of the row field;
* the UMDAM layout (paper Algorithm 1) splits a weight matrix into tiles of ``tile_height =
  interleave_bytes / elem_bytes`` rows and ``tile_width = channels * ranks * bankgroups * banks``
  columns. Element ``(local_row, local_col)`` of tile ``(tile_row, tile_col)`` goes to

  - ``(colL, offset) = bits(local_row * elem_bytes)``,
  - ``(bankgroup, bank, rank, channel) = bits(local_col)`` (channel in the low bits; the
    same order as the ``umdam`` mapping, so an NPU walk stays sequential),
  - ``(row, colM) = bits(base_tile + tile_col * num_tile_rows + tile_row)``,

  so every matrix column lives in one bank and a tile is one block of ``tile_width`` interleave
  blocks. A matrix whose size is not a multiple of the tile is padded up to whole tiles: the
  padding slots are reserved (never emitted) and are the only storage overhead.

Walk orders of the tile address generator:

* ``npu``: tiles in storage order (tile columns outer, tile rows inner), each tile column-major:
  under the UMDAM mapping this is a sequential address stream;
* ``pim``: bank by bank (``local_col`` outer), each bank's full columns in column order, each column
  top to bottom: what one bank-level PIM unit reads from its own bank.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "WALK_ORDERS", "map_addresses", "compose_addresses", "mapper_outputs", "tile_shape",
    "tile_grid", "layout_coordinates", "layout_addresses", "walk",
]

WALK_ORDERS = ("npu", "pim")

_COORDS = ("channel", "rank", "bankgroup", "bank", "row", "col", "offset")


def _u64(values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"addresses must be integers, not {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"addresses must be non-negative, not {int(arr.min())}")
    return arr.astype(np.uint64)


def _bits(values: np.ndarray, lsb: int, width: int) -> np.ndarray:
    return (values >> np.uint64(lsb)) & np.uint64((1 << width) - 1)


def map_addresses(mapping, addresses) -> dict[str, np.ndarray]:
    """Map physical addresses to DRAM coordinates.

    Parameters
    ----------
    mapping : hdl.umdam.geometry.AddressMapping
    addresses : array_like of int
        Each below ``2 ** mapping.address_bits``.

    Returns
    -------
    dict of str to numpy.ndarray
        One uint64 array per coordinate (``channel rank bankgroup bank row col offset``).
    """
    addr = _u64(addresses)
    limit = 1 << mapping.address_bits
    if addr.size and int(addr.max()) >= limit:
        raise ValueError(f"address {int(addr.max()):#x} is outside the {mapping.address_bits}-bit "
                         f"address space (below {limit:#x})")
    raw = {f.name: _bits(addr, f.lsb, f.width) for f in mapping.fields}
    widths = mapping.geometry.widths
    zero = np.zeros(addr.shape, np.uint64)
    row = raw.get("row", zero)
    coords = {}
    for f in mapping.fields:
        value = raw[f.name]
        if f.xor_row:
            value = value ^ (row & np.uint64((1 << f.width) - 1))
        coords[f.name] = value
    if "colM" in coords or "colL" in coords:
        coords["col"] = (coords.pop("colM", zero) << np.uint64(widths["colL"])) | \
            coords.pop("colL", zero)
    return {name: coords.get(name, zero) for name in _COORDS}


def compose_addresses(mapping, coordinates: dict) -> np.ndarray:
    """Return the physical addresses of DRAM coordinates: the inverse of :func:`map_addresses`.

    Raises
    ------
    ValueError
        If a coordinate does not fit its field.
    """
    widths = mapping.geometry.widths
    unknown = sorted(set(coordinates) - set(_COORDS))
    if unknown:
        raise ValueError(f"unknown coordinate(s) {', '.join(unknown)}; coordinates are "
                         f"{', '.join(_COORDS)}")
    shape = np.broadcast(*[np.asarray(coordinates.get(n, 0)) for n in _COORDS]).shape
    coords = {}
    for name in _COORDS:
        raw = np.asarray(coordinates.get(name, 0))
        if raw.size and raw.min() < 0:
            raise ValueError(f"coordinate {name} must be non-negative, not {int(raw.min())}")
        value = np.broadcast_to(_u64(raw), shape)
        if value.size and int(value.max()) >= 1 << widths[name]:
            raise ValueError(f"coordinate {name}={int(value.max())} does not fit its "
                             f"{widths[name]} bits")
        coords[name] = value
    colL_w = widths["colL"]
    coords["colM"] = coords["col"] >> np.uint64(colL_w)
    coords["colL"] = coords["col"] & np.uint64((1 << colL_w) - 1)
    addr = np.zeros(shape, np.uint64)
    for f in mapping.fields:
        value = coords[f.name]
        if f.xor_row:
            value = value ^ (coords["row"] & np.uint64((1 << f.width) - 1))
        addr |= value << np.uint64(f.lsb)
    return addr


def mapper_outputs(mappings: Sequence, addresses, selects=None) -> dict[str, np.ndarray]:
    """Model the run-time selectable mapper: coordinates plus an ``error`` flag per request.

    A select value outside ``range(len(mappings))`` gives ``error = 1`` and all-zero coordinates.
    """
    addr = _u64(addresses)
    sel = np.zeros(addr.shape, np.int64) if selects is None else np.asarray(selects, np.int64)
    out = {name: np.zeros(addr.shape, np.uint64) for name in _COORDS}
    for index, mapping in enumerate(mappings):
        hit = sel == index
        if hit.any():
            coords = map_addresses(mapping, addr[hit])
            for name in _COORDS:
                out[name][hit] = coords[name]
    out["error"] = ((sel < 0) | (sel >= len(mappings))).astype(np.uint64)
    return out


def tile_shape(geometry, elem_bytes: int) -> tuple[int, int]:
    """Return ``(tile_height, tile_width)`` in elements for an element size of 1, 2 or 4 bytes."""
    if isinstance(elem_bytes, bool) or not isinstance(elem_bytes, (int, np.integer)) or \
            elem_bytes not in (1, 2, 4):
        raise ValueError(f"Element size must be 1, 2 or 4 bytes, not {elem_bytes!r}")
    return geometry.interleave_bytes // elem_bytes, geometry.bank_count


def tile_grid(geometry, rows: int, cols: int, elem_bytes: int,
              base_tile: int = 0) -> tuple[int, int]:
    """Return ``(num_tile_rows, num_tile_cols)`` after checking the matrix fits above ``base_tile``.

    Raises
    ------
    ValueError
        For an empty matrix or one whose tiles run past the last row of the memory.
    """
    th, tw = tile_shape(geometry, elem_bytes)
    if rows < 1 or cols < 1:
        raise ValueError(f"Matrix must have at least one row and one column, not {rows} x {cols}")
    if base_tile < 0:
        raise ValueError(f"Base tile slot must be at least 0, not {base_tile}")
    ntr, ntc = -(-rows // th), -(-cols // tw)
    widths = geometry.widths
    slots = 1 << (widths["row"] + widths["colM"])
    if base_tile + ntr * ntc > slots:
        raise ValueError(f"A {rows} x {cols} matrix needs {ntr * ntc} tiles from tile {base_tile}, "
                         f"but the memory has {slots} tile slots")
    return ntr, ntc


def layout_coordinates(geometry, rows: int, cols: int, elem_bytes: int,
                       base_tile: int = 0) -> dict[str, np.ndarray]:
    """Apply Algorithm 1: DRAM coordinates of every element, as ``rows x cols`` arrays."""
    th, tw = tile_shape(geometry, elem_bytes)
    ntr, _ = tile_grid(geometry, rows, cols, elem_bytes, base_tile)
    widths = geometry.widths
    i = np.arange(rows, dtype=np.uint64)[:, None]
    j = np.arange(cols, dtype=np.uint64)[None, :]
    tile_row, local_row = i // np.uint64(th), i % np.uint64(th)
    tile_col, local_col = j // np.uint64(tw), j % np.uint64(tw)
    byte = local_row * np.uint64(elem_bytes)
    slot = np.uint64(base_tile) + tile_col * np.uint64(ntr) + tile_row
    shape = (rows, cols)
    coords = {
        "offset": _bits(byte, 0, widths["offset"]),
        "col": (_bits(slot, 0, widths["colM"]) << np.uint64(widths["colL"]))
               | _bits(byte, widths["offset"], widths["colL"]),
        "row": _bits(slot, widths["colM"], widths["row"]),
    }
    lsb = 0
    for name in ("channel", "rank", "bank", "bankgroup"):
        coords[name] = _bits(local_col, lsb, widths[name])
        lsb += widths[name]
    return {name: np.broadcast_to(coords[name], shape).copy() for name in _COORDS}


def layout_addresses(mapping, rows: int, cols: int, elem_bytes: int,
                     base_tile: int = 0) -> np.ndarray:
    """Physical address of every element of a ``rows x cols`` matrix laid out by Algorithm 1."""
    coords = layout_coordinates(mapping.geometry, rows, cols, elem_bytes, base_tile)
    return compose_addresses(mapping, coords)


def walk(mapping, rows: int, cols: int, elem_bytes: int, base_tile: int = 0,
         order: str = "npu") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(i, j, address)`` arrays in the order the tile address generator emits them."""
    if order not in WALK_ORDERS:
        raise ValueError(f"Walk order must be one of {', '.join(WALK_ORDERS)}, not {order!r}")
    th, tw = tile_shape(mapping.geometry, elem_bytes)
    addresses = layout_addresses(mapping, rows, cols, elem_bytes, base_tile)
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    i, j = i.ravel(), j.ravel()
    tile_row, local_row = i // th, i % th
    tile_col, local_col = j // tw, j % tw
    if order == "npu":
        keys = (local_row, local_col, tile_row, tile_col)        # lexsort: last key is outermost
    else:
        keys = (local_row, tile_row, tile_col, local_col)
    index = np.lexsort(keys)
    return i[index], j[index], addresses.ravel()[index]


def iter_fields(mapping) -> Iterable[tuple[str, int, int]]:
    """Yield ``(name, msb, lsb)`` of every mapping field, MSB first (for tables in docs)."""
    for f in mapping.fields:
        yield f.name, f.lsb + f.width - 1, f.lsb


def generator_beats(mapping, elem_bytes: int, max_rows: int, max_cols: int, rows: int, cols: int,
                    base_tile: int, order: str) -> list[dict[str, int]]:
    """Model one command of the tile address generator: its output beats, in order.

    A command the generator must refuse (empty matrix, larger than ``max_rows`` x ``max_cols``, or
    running past the last tile slot) gives one beat ``{"error": 1, "last": 1}``; the address and
    index fields of that beat carry no meaning and are left out.
    """
    if rows > max_rows or cols > max_cols:
        return [{"error": 1, "last": 1}]
    try:
        i, j, addr = walk(mapping, rows, cols, elem_bytes, base_tile, order)
    except ValueError:
        return [{"error": 1, "last": 1}]
    last = len(addr) - 1
    return [{"addr": int(a), "i": int(r), "j": int(c), "last": int(n == last), "error": 0}
            for n, (r, c, a) in enumerate(zip(i.tolist(), j.tolist(), addr.tolist()))]
