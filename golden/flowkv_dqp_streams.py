"""FusedDQP's stream items, from and to NumPy: the Q4NX record stream (:func:`golden.flowkv_dqp.
q4nx_records`) cut into the ``q`` port's weight beats, the activation cut into ``a`` beats,
commands, and random Q4NX matrices. Shared by the cocotb testbench (cocotb_tests/flowkv/dqp_tb.py),
the board vectors (memwall/board/vectors.py) and the Amaranth-simulator tests
(tests/test_flowkv_dqp.py); no expected value is computed here."""

from __future__ import annotations

import numpy as np

from hdl.arith.format import BF16
from hdl.flowkv import DQPConfig

from .arith.float import from_float
from .flowkv_dqp import GROUP, RECORD_BYTES, Q4NX, q4nx_records

__all__ = ["command", "weight_beats", "record_bytes", "activation_beats", "job_streams",
           "random_q4nx"]


def command(cfg: DQPConfig, inputs: int, outputs: int, *, dequant: bool = False,
            bf16: bool = False) -> dict:
    """The ``cmd`` item of a ``K x N`` command (counts less one)."""
    return {"groups": inputs // GROUP - 1, "tiles": outputs // cfg.tile - 1,
            "dequant": int(dequant), "bf16": int(bf16)}


def weight_beats(w: Q4NX, cfg: DQPConfig) -> list[dict]:
    """``w``'s record stream (:func:`golden.flowkv_dqp.q4nx_records`) as ``q`` items: ``5 lanes
    / 8`` bytes each, little-endian."""
    stream = q4nx_records(w, cfg.tile).reshape(-1)
    size = cfg.beat_bits // 8
    return [{"data": int.from_bytes(stream[k:k + size].tobytes(), "little")}
            for k in range(0, stream.size, size)]


def record_bytes(beats: list[int], cfg: DQPConfig) -> np.ndarray:
    """The bytes of ``q`` beats' ``data`` (a whole number of records): ``(records, 20)``."""
    size = cfg.beat_bits // 8
    raw = b"".join(int(b).to_bytes(size, "little") for b in beats)
    return np.frombuffer(raw, np.uint8).reshape(-1, RECORD_BYTES)


def activation_beats(a, cfg: DQPConfig, tiles: int) -> list[dict]:
    """``a`` (bf16 codes ``(K,)``, the same for every tile, or ``(tiles, K)``) as ``a`` items:
    per tile, group by group, ``lanes`` inputs a beat."""
    a = np.broadcast_to(np.asarray(a, np.uint16), (tiles, np.shape(a)[-1]))
    L = cfg.lanes
    return [{f"data.{i}": int(x) for i, x in enumerate(row[k:k + L])}
            for row in a for k in range(0, row.size, L)]


def job_streams(cfg: DQPConfig, w: Q4NX, a=None, *, bf16: bool = False) -> dict[str, list]:
    """The ``cmd``, ``q`` and ``a`` items of one command: ``y = W a`` (``a`` given) or the
    dequantization of ``w`` (``a`` None)."""
    outputs, inputs = w.shape
    out = {"cmd": [command(cfg, inputs, outputs, dequant=a is None, bf16=bf16)],
           "q": weight_beats(w, cfg), "a": []}
    if a is not None:
        out["a"] = activation_beats(a, cfg, outputs // cfg.tile)
    return out


def random_q4nx(rng: np.random.Generator, rows: int, cols: int, *, scale: float = 2.0 ** -6,
                minimum: float = 2.0 ** -3) -> Q4NX:
    """A Q4NX matrix with N(0, scale^2) scales, N(0, minimum^2) minimums (both signs) and
    uniform codes: SmolLM2's weights are of this size (|d| ~ 2**-7, |m| ~ 2**-4)."""
    groups = (rows, cols // GROUP)
    return Q4NX(d=from_float(rng.standard_normal(groups) * scale, BF16),
                m=from_float(rng.standard_normal(groups) * minimum, BF16),
                q=rng.integers(0, 16, (rows, cols)).astype(np.uint8))
