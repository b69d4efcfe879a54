"""The in-flash PE's contract as the testbench reads it: which commands it refuses, the KV
layout and golden page schedule a command names, and the coverpoints of a command.

The rules follow docs/inflash.md section 3 (the PE's refusals) and ``hdl.inflash.spec``'s
``WriteError`` (the KV page writer's), written from the specification, not from the RTL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from golden import inflash as golden
from hdl.arith.format import BF16, FP16
from hdl.inflash.spec import (ATTENTION_MODES, IMPLEMENTED_MODES, MAX_KV_HEADS, MAX_LAYERS,
                              MAX_TOKENS, Mode, Op)

from ..functional import sampler

if TYPE_CHECKING:
    from .env import InflashTB

#: KV formats of Logit and Attend by ``Mode`` code.
KV_FORMAT = {Mode.FP16: "fp16", Mode.BF16: "bf16", Mode.W8A8: "int8"}
#: The float KV formats by name.
KV_FLOAT_FORMATS = {"fp16": FP16, "bf16": BF16}


def kv_layout(cfg, cmd: dict) -> golden.KVLayout:
    """The KV layout an attention command names."""
    return golden.KVLayout(cmd["layers"], cmd["kv_heads"], cmd["head_dim"],
                           KV_FORMAT[Mode(cmd["mode"])], page_bytes=cfg.page_bytes,
                           mapping=golden.MAPPINGS[cmd["mapping"]])


def attention_is_refused(cfg, cmd: dict) -> bool:
    """The refusal rules of Logit and Attend (docs/inflash.md section 3)."""
    T, G, d = cmd["tokens"], cmd["query_heads"], cmd["head_dim"]
    L, H, layer, head = cmd["layers"], cmd["kv_heads"], cmd["layer"], cmd["head"]
    if cmd["mode"] not in ATTENTION_MODES or not 1 <= T <= MAX_TOKENS \
            or not 1 <= G <= cfg.max_query_heads or not 1 <= d <= cfg.max_head_dim \
            or d * (1 if cmd["mode"] == Mode.W8A8 else 2) > cfg.page_bytes \
            or G * -(-d // cfg.fmacs) > cfg.max_beats \
            or not 1 <= L <= MAX_LAYERS or not 1 <= H <= MAX_KV_HEADS \
            or not layer < L or not head < H:
        return True
    layout = kv_layout(cfg, cmd)
    kind = golden.K if cmd["op"] == Op.LOGIT else golden.V
    last, _ = golden.kv_address(layout, layer, head, T - 1, kind)
    return cmd["page"] + int(last) >= cfg.geometry.pages


def is_refused(cfg, cmd: dict) -> bool:
    """The contract's refusal rules (docs/inflash.md section 3)."""
    if cmd["op"] in (Op.LOGIT, Op.ATTEND):
        return attention_is_refused(cfg, cmd)
    if cmd["op"] != Op.GEMV:
        return True
    rows, cols = cmd["rows"], cmd["cols"]
    if cmd["mode"] not in IMPLEMENTED_MODES \
            or not 1 <= rows <= cfg.max_rows or not 1 <= cols <= cfg.max_cols:
        return True
    mode = Mode(cmd["mode"]).name.lower()
    if mode == "w4a16" and cols % cfg.group_size:
        return True
    pages = golden.page_count(mode, rows, cols, group_size=cfg.group_size,
                              page_bytes=cfg.page_bytes)
    return cmd["page"] + pages > cfg.geometry.pages



def writer_refuses(cfg, cmd: dict) -> bool:
    """The KV page writer's ``LAYOUT`` rule (``hdl.inflash.spec.WriteError``)."""
    entry = cmd["head_dim"] * (1 if cmd["mode"] == Mode.W8A8 else 2)
    return (cmd["mode"] not in ATTENTION_MODES or cmd["head_dim"] == 0
            or entry > cfg.page_bytes or not 1 <= cmd["layers"] <= MAX_LAYERS
            or not 1 <= cmd["kv_heads"] <= MAX_KV_HEADS or cmd["pages"] == 0
            or cmd["page"] + cmd["pages"] > cfg.geometry.pages)



def command_name(cmd: dict) -> str:
    return f"{Op(cmd['op']).name.lower()}_{Mode(cmd['mode']).name.lower()}"


def command_timing(tb: "InflashTB", cmd: dict):
    """The golden page schedule of a command the PE took (None for a refused one)."""
    cfg = tb.cfg
    if cmd["refused"]:
        return None
    if cmd["op"] == Op.GEMV:
        return golden.gemv_timing(tb.geometry, Mode(cmd["mode"]).name.lower(), cmd["rows"],
                                  cmd["cols"], group_size=cfg.group_size)
    return golden.attention_timing(tb.geometry, kv_layout(cfg, cmd), cmd["tokens"],
                                   op=Op(cmd["op"]).name.lower(), group=cmd["query_heads"],
                                   layer=cmd["layer"], head=cmd["head"])


def paced_by(timing) -> str | None:
    """What sets the page period of a command's first full page: the array read (``tR``), the
    page transfer or the PE's compute (the largest; ties go to the earlier of the three); a
    single page has no period."""
    if timing is None:
        return None
    if len(timing.compute) < 2:
        return "single_page"
    stages = {"tR": timing.tR, "transfer": int(timing.transfer[0]),
              "compute": int(timing.compute[0])}
    return max(stages, key=stages.get)


def pacing_unreachable(geometry) -> dict[str, str]:
    """The page pacings a geometry cannot reach: a transfer no longer than tR never sets the
    period (a tie goes to tR)."""
    transfer, read = geometry.page_transfer_cycles, geometry.tR_cycles
    if transfer <= read:
        return {"transfer": f"a page's transfer ({transfer} cycles) never exceeds tR "
                            f"({read} cycles)"}
    return {}


def command_sampler(tb: "InflashTB"):
    """The coverpoints of a command the PE took (refused or not worked out once per command):
    operation x precision mode, refused or not,
    for attention the KV mapping x MHA or GQA, for a GEMV whether its stream fills its last
    page, and which of tR, transfer and compute paces its pages."""
    block, cfg = tb.block.name, tb.cfg
    commands = [f"gemv_{m.name.lower()}" for m in IMPLEMENTED_MODES] + \
        [f"{op}_{m.name.lower()}" for op in ("logit", "attend") for m in ATTENTION_MODES]

    def attention(f):
        return lambda c: f(c) if c["op"] in (Op.LOGIT, Op.ATTEND) and not c["refused"] else None

    def last_page(c):
        if c["op"] != Op.GEMV or c["refused"]:
            return None
        used = golden.stream_bytes(Mode(c["mode"]).name.lower(), c["rows"], c["cols"],
                                   group_size=cfg.group_size)
        return "fills_last_page" if used % cfg.page_bytes == 0 else "partial_last_page"

    sample = sampler({
        f"{block}.command": (lambda c: command_name(c) if c["op"] in tuple(Op) and
                             c["mode"] in tuple(Mode) else None, commands),
        f"{block}.refused": (lambda c: c["refused"], (False, True)),
        f"{block}.mapping": (attention(lambda c: golden.MAPPINGS[c["mapping"]]),
                             golden.MAPPINGS),
        f"{block}.heads": (attention(lambda c: "mha" if c["query_heads"] == 1 else "gqa"),
                           ("mha", "gqa")),
        f"{block}.last_page": (last_page, ("fills_last_page", "partial_last_page")),
        f"{block}.paced_by": (lambda c: paced_by(command_timing(tb, c)),
                              ("tR", "transfer", "compute", "single_page")),
    }, {f"{block}.mapping_x_heads": [f"{block}.mapping", f"{block}.heads"]},
        {f"{block}.paced_by": pacing_unreachable(tb.geometry)})
    return lambda c: sample({**c, "refused": is_refused(cfg, c)})     # the rules, once

