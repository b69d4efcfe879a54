"""cocotb testbench of the UMDAM blocks: address mapper, address composer, tile address generator.

The launcher names the block and its parameters; each test picks the TB class for that block. The
expected outputs come from :mod:`golden.umdam`, fed by the input monitor.
"""

from __future__ import annotations

import cocotb
from cocotb.triggers import ClockCycles

from golden import umdam as golden
from hdl.umdam import COORDINATES, WalkOrder

from .functional import sampler, value_class, value_classes
from .tb import BlockTB, select_tb


def _select_points(block: str, codec_fields, mappings: int) -> dict[str, tuple]:
    """The mapping select an input carries (every value its field can hold, valid or not) and
    the class of each coordinate field's value in the items of ``codec_fields``."""
    widths = {f["name"]: f["width"] for f in codec_fields}
    points = {f"{block}.mapping": (lambda item: item.get("mapping", 0),
                                   range(max(mappings, 1 << widths.get("mapping", 0))))}
    for name in COORDINATES:
        if widths.get(name):
            points[f"{block}.field.{name}"] = (
                lambda item, n=name, w=widths[name]: value_class(item[n], w), value_classes(
                    widths[name]))
    return points


def _flag_points(block: str, codec_fields) -> dict[str, tuple]:
    """Both values of each one-bit flag (``error``, ``last``) of the outputs that have it."""
    return {f"{block}.{f['name']}": (lambda item, n=f["name"]: item[n], (0, 1))
            for f in codec_fields if f["name"] in ("error", "last")}


class MapperTB(BlockTB):
    """Physical addresses (and a mapping select) in, coordinates (and an error flag) out."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        self.mappings = self.params.address_mappings
        self.out_fields = {f["name"] for f in self.codecs["o"].fields}
        bits = self.params.geometry.address_bits
        block = self.block.name
        points = _select_points(block, self.codecs["i"].fields, len(self.mappings))
        points[f"{block}.addr"] = (lambda item: value_class(item["addr"], bits),
                                   value_classes(bits))
        self.samplers = {"i": sampler(points, {f"{block}.mapping_x_addr": [f"{block}.mapping",
                                                                          f"{block}.addr"]}),
                         "o": sampler({**_select_points(block, self.codecs["o"].fields, 1),
                                       **_flag_points(block, self.codecs["o"].fields)})}

    def model(self, stream, item):
        out = golden.mapper_outputs(self.mappings, [item["addr"]], [item.get("mapping", 0)])
        return {"o": [{k: int(v[0]) for k, v in out.items() if k in self.out_fields}]}

    def stimulus(self, count: int):
        """Random addresses and selects, plus every single-bit address and both extremes."""
        bits = self.params.geometry.address_bits
        sel_bits = self.component.i.payload.shape().size - bits
        items = [{"addr": a} for a in (0, (1 << bits) - 1, *(1 << b for b in range(bits)))]
        items += [{"addr": self.rng.getrandbits(bits)} for _ in range(count)]
        for item in items:
            if sel_bits:
                item["mapping"] = self.rng.getrandbits(sel_bits)
        return items


class ComposerTB(BlockTB):
    """Coordinates (and a mapping select) in, physical address (and an error flag) out."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        self.mappings = self.params.address_mappings
        self.out_fields = {f["name"] for f in self.codecs["o"].fields}
        block = self.block.name
        self.samplers = {"i": sampler(_select_points(block, self.codecs["i"].fields,
                                                     len(self.mappings))),
                         "o": sampler(_flag_points(block, self.codecs["o"].fields))}

    def model(self, stream, item):
        select = item.get("mapping", 0)
        if select >= len(self.mappings):
            return {"o": [{"addr": 0, "error": 1}]}
        coords = {k: v for k, v in item.items() if k in COORDINATES}
        addr = int(golden.compose_addresses(self.mappings[select], coords))
        return {"o": [{k: v for k, v in {"addr": addr, "error": 0}.items()
                       if k in self.out_fields}]}

    def stimulus(self, count: int):
        fields = self.codecs["i"].fields
        return [{f["name"]: self.rng.getrandbits(f["width"]) for f in fields}
                for _ in range(count)]


class TileGenTB(BlockTB):
    """Walk commands in, one address beat per matrix element out."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("cmd",), ("o",), **kwargs)
        p = self.params
        self.mapping = p.address_mapping
        self.tile_height, self.tile_width = golden.tile_shape(p.geometry, p.elem_bytes)
        widths = p.geometry.widths
        self.slots = 1 << (widths["row"] + widths["colM"])
        block = self.block.name
        order = {WalkOrder.NPU.value: "npu", WalkOrder.PIM.value: "pim"}

        def tail(size: int, tile: int):
            return None if size == 0 else "whole" if size % tile == 0 else "partial"
        self.samplers = {
            "cmd": sampler({f"{block}.order": (lambda item: order[item["order"]], order.values()),
                            f"{block}.rows": (lambda item: tail(item["rows"], self.tile_height),
                                              ("whole", "partial")),
                            f"{block}.cols": (lambda item: tail(item["cols"], self.tile_width),
                                              ("whole", "partial"))},
                           {f"{block}.order_x_rows_x_cols": [f"{block}.order", f"{block}.rows",
                                                            f"{block}.cols"]}),
            "o": sampler(_flag_points(block, self.codecs["o"].fields))}

    def model(self, stream, item):
        p = self.params
        order = "npu" if item["order"] == WalkOrder.NPU.value else "pim"
        return {"o": golden.generator_beats(self.mapping, p.elem_bytes, p.max_rows, p.max_cols,
                                             item["rows"], item["cols"], item["base_tile"],
                                             order)}

    def command(self, rows, cols, base_tile, order):
        return {"rows": rows, "cols": cols, "base_tile": base_tile,
                "order": (WalkOrder.NPU if order == "npu" else WalkOrder.PIM).value}

    def random_command(self, max_elements: int):
        p = self.params
        rows = self.rng.randint(1, p.max_rows)
        cols = self.rng.randint(1, max(1, min(p.max_cols, max_elements // rows)))
        tiles = -(-rows // self.tile_height) * -(-cols // self.tile_width)
        base = self.rng.randint(0, max(0, self.slots - tiles))
        return self.command(rows, cols, base, self.rng.choice(("npu", "pim")))

    def directed_commands(self):
        p, th, tw = self.params, self.tile_height, self.tile_width
        shapes = {(1, 1), (th, tw), (th + 1, tw + 1), (th - 1 or 1, tw - 1 or 1),
                  (min(p.max_rows, 2 * th), 1), (1, min(p.max_cols, 2 * tw + 1))}
        cmds = [self.command(min(r, p.max_rows), min(c, p.max_cols), 0, order)
                for r, c in sorted(shapes) for order in ("npu", "pim")]
        rows_field = self.component.cmd.payload.shape()["rows"].width
        cmds += [self.command(0, 1, 0, "npu"), self.command(1, 0, 0, "pim"),
                 self.command(1, 1, self.slots - 1, "pim")]                  # last slot: legal
        if p.max_rows < (1 << rows_field) - 1:
            cmds.append(self.command(p.max_rows + 1, 1, 0, "npu"))           # too many rows
        if self.slots > 1:
            cmds.append(self.command(th + 1, 1, self.slots - 1, "npu"))      # past the last slot
        return cmds


_TB = {"umdam": MapperTB, "umdam-composer": ComposerTB, "umdam-tilegen": TileGenTB}


def make_tb(dut, **kwargs):
    return select_tb(dut, _TB, **kwargs)


@cocotb.test()
async def random_traffic(dut):
    """Random and directed requests with random idle cycles and back-pressure."""
    tb = make_tb(dut, idle=0.3, backpressure=0.3)
    await tb.reset()
    if isinstance(tb, TileGenTB):
        await tb.check_items(tb.directed_commands() + [tb.random_command(600) for _ in range(12)],
                             stream="cmd")
    else:
        await tb.check_items(tb.stimulus(2000))


@cocotb.test()
async def exhaustive(dut):
    """Every address (or coordinate tuple) under every select value, on geometries up to 14 bits."""
    tb = make_tb(dut, idle=0.1, backpressure=0.1)
    await tb.reset()
    if isinstance(tb, TileGenTB):
        # Every matrix shape up to 3 x 3 tiles (capped at the maximum) in both orders.
        p = tb.params
        if tb.tile_height * tb.tile_width > 64:
            tb.log.info("%d x %d tiles: the every-shape sweep runs on tiles of at most 64 "
                        "elements (the small preset) and was not run here",
                        tb.tile_height, tb.tile_width)
            return
        await tb.check_items([tb.command(rows, cols, 0, order)
                              for rows in range(1, min(p.max_rows, 3 * tb.tile_height) + 1,
                                                max(1, tb.tile_height // 2))
                              for cols in range(1, min(p.max_cols, 3 * tb.tile_width) + 1)
                              for order in ("npu", "pim")], stream="cmd")
    else:
        width = tb.codecs["i"].width
        if width > 14:
            tb.log.info("input is %d bits wide; exhaustive sweep runs on geometries of at most "
                        "14 bits (the small preset) and was not run here", width)
            return
        codec = tb.codecs["i"]
        await tb.check_items([codec.unpack(word) for word in range(1 << width)])


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles and no back-pressure, one result per cycle after the stated latency."""
    tb = make_tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    if isinstance(tb, TileGenTB):
        p = tb.params
        rows, cols = min(p.max_rows, 2 * tb.tile_height + 3), min(p.max_cols, 2 * tb.tile_width + 1)
        tb.send("cmd", [tb.command(rows, cols, 0, "npu")])
        await tb.drain()
        count = rows * cols
        tb.check_full_rate(count, tb.component.command_latency, source="cmd",
                           latency_meaning="command accepted to first address")
    else:
        count = 500
        tb.send("i", tb.stimulus(count)[:count])
        await tb.drain()
        tb.check_full_rate(count, tb.params.latency,
                           latency_meaning="input accepted to output valid")
