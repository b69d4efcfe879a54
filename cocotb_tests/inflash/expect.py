"""What each command the monitors saw still expects: its page reads, then its outputs as soon
as their inputs are in (the golden model of ``golden.inflash`` fed with what the design took).

:class:`GemvCommand` and :class:`AttentionCommand` are the PE's commands (``cmd``);
:class:`KVSequence` is one sequence on the KV page writer (``kv_cmd`` and its ``kv`` words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from golden import inflash as golden
from hdl.inflash.spec import Mode, Op

from ..streams import to_signed
from .contract import KV_FORMAT, is_refused, kv_layout, writer_refuses
from .plane import kv_reads

if TYPE_CHECKING:
    from .env import InflashTB, InflashUnitTB


class GemvCommand:
    """One GEMV command (or a command refused outright) as the monitors saw it, and what it
    still needs."""

    def __init__(self, tb: "InflashTB", cmd: dict):
        cfg = tb.component.cfg
        self.cmd = cmd
        self.mode = Mode(cmd["mode"]).name.lower()
        self.rows, self.cols = cmd["rows"], cmd["cols"]
        self.group = cfg.group_size
        self.page_bytes = cfg.page_bytes
        self.refused = is_refused(cfg, cmd)
        self.x: list[int] = []
        self.data = bytearray()
        self.done_rows = 0
        if self.refused:
            self.x_beats = self.size = 0
            return
        self.x_beats = -(-self.cols // cfg.fmacs)
        self.size = golden.stream_bytes(self.mode, self.rows, self.cols, group_size=self.group)
        self.row_bytes = self.size // self.rows

    def reads(self, page_bytes: int) -> list[dict]:
        """The page reads the contract asks for."""
        n = -(-self.size // page_bytes)
        sizes = [min(page_bytes, self.size - k * page_bytes) for k in range(n)]
        return [{"page": self.cmd["page"] + k, "column": 0, "bytes": b, "run": b, "stride": b}
                for k, b in enumerate(sizes)]

    def outputs(self) -> list[dict]:
        """The outputs whose inputs are all in and that were not queued yet."""
        if self.refused:
            self.done_rows = 1
            return [{"value": 0, "last": 1, "error": 1}]
        if len(self.x) < self.cols:
            return []
        ready = min(self.rows, len(self.data) // self.row_bytes)
        if ready <= self.done_rows:
            return []
        stream = np.frombuffer(bytes(self.data[self.done_rows * self.row_bytes:
                                               ready * self.row_bytes]), np.uint8)
        n = ready - self.done_rows
        if self.mode == "w8a8":
            w = golden.Weights(self.mode, stream.view(np.int8).reshape(n, self.cols))
            x = to_signed(np.array(self.x[:self.cols], np.int64), 8)
        elif self.mode == "w4a16":
            # The records of these rows, read back through the golden layout (its page form).
            P = self.page_bytes
            padded = np.full(-(-len(stream) // P) * P, golden.ERASED, np.uint8)
            padded[:len(stream)] = stream
            w = golden.weights_from_pages(padded.reshape(-1, P), self.mode, n, self.cols,
                                          group_size=self.group)
            x = np.array(self.x[:self.cols], np.uint16)
        else:
            w = golden.Weights(self.mode, stream.view("<u2").reshape(n, self.cols))
            x = np.array(self.x[:self.cols], np.uint16)
        y = golden.gemv(w, x)
        out = [{"value": int(v) & 0xFFFFFFFF, "error": 0,
                "last": int(self.done_rows + i == self.rows - 1)} for i, v in enumerate(y)]
        self.done_rows = ready
        return out

    @property
    def complete(self) -> bool:
        return self.done_rows == (1 if self.refused else self.rows)


class AttentionCommand:
    """One Logit or Attend command as the monitors saw it, and what it still needs."""

    def __init__(self, tb: "InflashTB", cmd: dict):
        cfg = tb.component.cfg
        self.cmd, self.F = cmd, cfg.fmacs
        self.op = Op(cmd["op"])
        self.refused = is_refused(cfg, cmd)
        self.x: list[int] = []
        self.data = bytearray()
        self.done = 0                       # outputs queued: tokens (Logit), 0 or 1 (Attend)
        if self.refused:
            self.x_beats = self.size = 0
            return
        self.fmt = KV_FORMAT[Mode(cmd["mode"])]
        self.T, self.G, self.d = cmd["tokens"], cmd["query_heads"], cmd["head_dim"]
        self.layout = kv_layout(cfg, cmd)
        self.kind = golden.K if self.op == Op.LOGIT else golden.V
        self.nb = -(-self.d // self.F)
        self.pb = -(-self.G // self.F)
        self.x_beats = self.G * self.nb if self.op == Op.LOGIT else self.T * self.pb
        self.entry = self.layout.entry_bytes
        self.size = self.T * self.entry

    def reads(self, page_bytes: int) -> list[dict]:
        if self.refused:
            return []
        return kv_reads(self.layout, self.T, self.cmd["layer"], self.cmd["head"], self.kind,
                        self.cmd["page"])

    def _codes(self, raw: list[int]) -> np.ndarray:
        arr = np.array(raw, np.int64)
        if self.fmt == "int8":
            return to_signed(arr, 8)
        return arr.astype(np.uint16)

    def _entries(self, first: int, last: int) -> np.ndarray:
        stream = np.frombuffer(bytes(self.data[first * self.entry:last * self.entry]), np.uint8)
        if self.fmt == "int8":
            return stream.view(np.int8).reshape(-1, self.d)
        return stream.view("<u2").reshape(-1, self.d)

    def outputs(self) -> list[dict]:
        """The outputs whose inputs are all in and that were not queued yet."""
        if self.refused:
            self.done = 1
            return [{"value": 0, "last": 1, "error": 1}]
        if len(self.x) < self.x_beats * self.F:
            return []
        tokens = min(self.T, len(self.data) // self.entry)
        if self.op == Op.LOGIT:
            if tokens <= self.done:
                return []
            q = np.stack([self._codes(self.x[h * self.nb * self.F:h * self.nb * self.F + self.d])
                          for h in range(self.G)])
            scores = golden.logit(q, self._entries(self.done, tokens), self.fmt).T
            out = [{"value": int(v) & 0xFFFFFFFF, "error": 0,
                    "last": int(self.done + t == self.T - 1 and h == self.G - 1)}
                   for t, row in enumerate(scores) for h, v in enumerate(row)]
            self.done = tokens
            return out
        if tokens < self.T or self.done:
            return []
        p = np.stack([self._codes(self.x[t * self.pb * self.F:t * self.pb * self.F + self.G])
                      for t in range(self.T)], axis=1)
        sums = golden.attend(p, self._entries(0, self.T), self.fmt).reshape(-1)
        self.done = 1
        return [{"value": int(v) & 0xFFFFFFFF, "error": 0, "last": int(i == len(sums) - 1)}
                for i, v in enumerate(sums)]

    @property
    def complete(self) -> bool:
        return self.done == (1 if self.refused or self.op == Op.ATTEND else self.T)



class KVSequence:
    """One sequence on the writer as the monitors saw it: its command and words."""

    def __init__(self, tb: "InflashUnitTB", cmd: dict):
        self.cmd = cmd
        self.words: list[dict] = []
        self.closed = False
        self.refused = writer_refuses(tb.cfg, cmd)
        self.layout = None if self.refused else kv_layout(tb.cfg, cmd)

