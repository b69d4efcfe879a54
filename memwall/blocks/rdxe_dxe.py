"""Registry entry of the rDXE decoder engine (``rdxe-dxe``): the layer controller and the DXT side
with one DXT or several behind the host's ports (:class:`hdl.rdxe.dxe.Dxe`, docs/rdxe.md 14.4,
16.5)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from hdl.arith.format import FP32
from hdl.pipeline import ResultQueue
from hdl.rdxe.act import GatedActivation, act_out_layout
from hdl.rdxe.ctrl import CtrlConfig, Store
from hdl.rdxe.dxe import Dxe
from hdl.rdxe.dxtside import _CHUNKS
from hdl.rdxe.dxts import result_queue_depth
from hdl.rdxe.gppu import Gppu, gppu_out_layout
from hdl.rdxe.hosted import DxeBoard
from hdl.rdxe.isa import SMOLLM2_STORAGE, ProgramSpace, instruction_layout
from hdl.rdxe.scalar import ScalarUnit, scalar_out_layout
from hdl.rdxe.spec import CODE_BITS, GBUS_BYTES, DxtConfig, command_layout

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, SynthSettings, register
from .rdxe import _dxt_size


@dataclass(frozen=True)
class DxeParams(BlockParams, DxtConfig):
    """The DXT's fields (:class:`hdl.rdxe.DxtConfig`, checked by it) and the controller's
    (:class:`hdl.rdxe.ctrl.CtrlConfig`, checked when the engine is built): the controller's lanes,
    head dimension and RC factor width are the DXT's.

    Parameters
    ----------
    tb_words : int
        Token buffer, fp32 words: 1 to 2**20.
    rr_bytes : int
        rr-SRAM, bytes: 1 to 2**20.
    registers : int
        Scalar registers: 1 to 64.
    const_words : int
        Constant memory, fp32 words: 1 to 2**20.
    gemvs : int
        GEMV tables (the layer's GEMVs and the identity the KV append uses): 1 to 64.
    program_words : int
        Instruction memory depth: 1 to 65,536.
    layers : int
        Layers a ``run`` loops over (the DXE holds them stationary; docs/rdxe.md 16.1): 1 to 64.
        Above 1 the engine takes the layer stride on ``stride`` and each layer's score step on
        ``scales``.
    slots : int
        Resident requests (docs/rdxe.md 16.2): 1 to 16. Above 1 ``run`` carries the token's
        ``slot``, ``restart`` and ``position``, and the engine takes ``stride``.
    dxts : int
        DXTs (docs/rdxe.md 16.5): 1 to 8, above 1 with one layer and one slot. The DXT fields
        are each DXT's; the engine's KV groups and query heads are ``dxts`` x the DXT's.
    vector_lanes : int or None
        Lanes of the controller's vector units (GPPU, activation, quantizer): a power of two
        from 2 to ``lanes``, or ``None`` for ``lanes``; a row goes to them in ``lanes /
        vector_lanes`` sub-beats (:class:`hdl.rdxe.ctrl.CtrlConfig`, docs/rdxe.md 14.2).
    """

    tb_words: int = SMOLLM2_STORAGE["tb_words"]
    rr_bytes: int = SMOLLM2_STORAGE["rr_bytes"]
    registers: int = SMOLLM2_STORAGE["registers"]
    const_words: int = SMOLLM2_STORAGE["const_words"]
    gemvs: int = 5
    program_words: int = 64
    layers: int = 1
    slots: int = 1
    dxts: int = 1
    vector_lanes: int | None = None

    def space(self) -> ProgramSpace:
        """The storage a program is assembled into (rows of ``lanes``)."""
        return ProgramSpace(tb_words=self.tb_words, rr_bytes=self.rr_bytes,
                            registers=self.registers, const_words=self.const_words,
                            gemvs=self.gemvs, align=self.lanes)

    def ctrl_config(self) -> CtrlConfig:
        return CtrlConfig(self.space(), lanes=self.lanes, head_dim=self.head_dim,
                          program_words=self.program_words, rc_bits=self.rc_bits,
                          layers=self.layers, vector_lanes=self.vector_lanes)

    def dxt_config(self) -> DxtConfig:
        return DxtConfig(**{f.name: getattr(self, f.name) for f in fields(DxtConfig)})


#: SmolLM2-135M's layer's controller space (the identity is the fifth GEMV table).
_SMOL_SPACE = dict(SMOLLM2_STORAGE, gemvs=5, program_words=64)

_PRESETS = {
    # The reduced Llama layer of sim/rdxe/reduced.py (2 heads of 8 in one KV group, hidden 16,
    # FFN 32) on the DXT tests/test_rdxe_side.py uses: 4 VACs of 4 lanes, WMEM for every GEMV and
    # the identity at once (256 rows), 64 KV-cache rows (64 tokens); the controller's vector
    # units at 2 lanes (the engine's ECP5 preset: docs/rdxe.md 14.4).
    "small": DxeParams(lanes=4, vacs=4, head_dim=8, group_size=2, kv_groups=1, wmem_depth=256,
                       ppu_depth=64, kv_rows=64, max_inputs=64, tb_words=128, rr_bytes=192,
                       registers=4, const_words=192, gemvs=5, program_words=64,
                       vector_lanes=2),
    # SmolLM2's layer on the rdxe-dxt default tile (4 VACs of 4 lanes, the controller at 4 lanes):
    # the layer's 3,538,944 weight bytes are 221,184 WMEM rows a VAC, and the 64 x 64 identity
    # 256 more; PPU entries 1,296 for the GEMVs, 16 for the identity, 1 score, 16 for P.V;
    # 2,048 KV rows hold 84 tokens of each of the 3 KV groups. Storage 29.3 Mbit (28.3 of it
    # WMEM): an ASIC's on-chip memory, not an FPGA's.
    "default": DxeParams(lanes=4, vacs=4, head_dim=64, group_size=3, kv_groups=3,
                         wmem_depth=221_440, ppu_depth=1_329, kv_rows=2048, max_inputs=1536,
                         **_SMOL_SPACE),
    # SmolLM2's layer on the paper's DXT (16 VACs of 16 multipliers, Sec. III): 13,824 WMEM rows
    # a VAC for the layer and 16 for the identity; 333 PPU entries (324, 4, 1, 4); 1,024 KV rows
    # hold 672 tokens of each of the 3 KV groups. Storage 31.2 Mbit (28.3 of it WMEM, 2.1 the KV
    # cache).
    "paper": DxeParams(lanes=16, vacs=16, head_dim=64, group_size=3, kv_groups=3,
                       wmem_depth=13_840, ppu_depth=333, kv_rows=1024, max_inputs=1536,
                       **_SMOL_SPACE),
    # SmolLM2's layer on three of the paper's DXTs (docs/rdxe.md 16.5 to 16.7), one KV group of 3
    # heads each (the layer's groups at homes 0, 1, 2). Each DXT holds its share of every GEMV
    # (hdl.rdxe.dxts.output_shares: 320 of QKV's 960 outputs, 192 of O's 576, 1,024 of
    # gate/up's 3,072, 192 of down's 576; sim.rdxe.host.dxt_loads): 4,608 WMEM rows a VAC and
    # 16 for the identity; 117 PPU entries (108, 4, 1, 4). 512 KV rows hold 1,024 tokens of
    # the DXT's group (the paper's 1,024 rows would make 35.7 Mbit, over the size guard; 256
    # hold 512 tokens, fewer than `paper`'s 672). Storage 32.5 Mbit (28.4 of it WMEM, 3.1 the
    # KV caches).
    "paper3": DxeParams(lanes=16, vacs=16, head_dim=64, group_size=3, kv_groups=1, dxts=3,
                        wmem_depth=4_624, ppu_depth=117, kv_rows=512, max_inputs=1536,
                        **_SMOL_SPACE),
}


#: Text overrides on ``small`` for two DXTs of one query head in one KV group each: the
#: reduced layer's 2 heads in 2 groups (one group of both would span the DXTs, which needs
#: VLINK); the second group's constants need 196 words. The several-DXT RTL is tested, linted
#: and proved at this set (tests/test_rdxe_dxts.py, tests/test_blocks.py,
#: tests/test_stream_contract.py, cocotb_tests/test_rdxe_dxe.py).
TWO_DXTS = {"dxts": "2", "group_size": "1", "const_words": "256"}


#: Netlist cells and multipliers of the controller per vector-unit lane (``vector_lanes``: the
#: GPPU's, the activation unit's) and besides them (the memories' row muxes, the issue
#: register, the sequencer, the scalar path), and cells of the DXT side (its state machine, the
#: GEMV tables, the operand queue): fitted to the whole engine's RTLIL at 4 and 8 lanes with
#: vector units of 8, 4 and 2 lanes (``lanes=8 head_dim=16``), the DXT's own estimate taken
#: off: 16,096, 11,903, 26,456, 18,068 and 13,874 cells, 202, 172, 306, 246 and 216
#: multipliers (session 25; the memories' lanes add no more than 15 cells a lane).
_CTRL_LANE_CELLS, _CTRL_CELLS = 2100, 1620
_CTRL_LANE_PRODUCTS, _CTRL_PRODUCTS = 15, 16
_SIDE_CELLS = 400
#: Cells of the DXT side's slots (the bases' products in logic, their registers, the counts'
#: ports): the netlist's 31 at ``slots=2 kv_groups=2``, 61 at 16 slots of 16 groups.
_SLOT_CELLS = 31
#: Cells of each DXT beyond the first (its GEMV tables, its command and chunk handshakes, its
#: result queue's pointers and the write arbiter's share), fitted to the netlist at the small
#: preset with ``group_size=1`` and ``dxts`` 2 and 4: 22,031 and 34,933 cells (estimated
#: 21,924 and 35,000), storage exact (157,632 and 293,632 bits).
_DXT_CELLS = 850


def _size(params: DxeParams) -> Size:
    """The DXT (:func:`~memwall.blocks.rdxe._dxt_size`), the controller's four memories (rows of
    ``lanes`` elements), its units' result queues (``SyncFIFOBuffered`` of the unit's
    :meth:`~hdl.pipeline.ResultQueue.full_rate_depth`: ``depth - 1`` places in memory) and the DXT
    side's chunk queue (and its table of score steps for several layers, its token counts for
    several slots); multipliers and cells per vector-unit lane and for the rest."""
    ctrl, dxt = params.ctrl_config(), params.dxt_config()
    L, U = params.lanes, ctrl.unit_lanes
    widths = {Store.PROG: instruction_layout(ctrl.space).size, Store.TB: FP32.width * L,
              Store.RR: CODE_BITS * L, Store.CONST: FP32.width * L}
    storage = sum(width * ctrl.rows(store) for store, width in widths.items())
    # The quantizer's results share the activation unit's queue (one core for both).
    units = ((Gppu.latency_of(U), gppu_out_layout(U)),
             (GatedActivation.latency_of(U), act_out_layout(U)),
             (ScalarUnit.latency_of(ctrl.ve), scalar_out_layout(ctrl.ve)))
    storage += sum((ResultQueue.full_rate_depth(latency) - 1) * layout.size
                   for latency, layout in units)
    storage += CODE_BITS * L * _CHUNKS
    if params.layers > 1:                    # the DXT side's score step a layer
        storage += FP32.width * params.layers
    if params.slots > 1:                     # and its token count a slot
        storage += command_layout(dxt)["tokens"].shape.width * params.slots
    D = params.dxts
    if D > 1:                                # each DXT's result queue of GBUS words and keeps
        storage += D * result_queue_depth(dxt) * (CODE_BITS + 1) * GBUS_BYTES
    tile = _dxt_size(dxt)
    return Size(storage_bits=D * tile.storage_bits + storage,
                multipliers=D * tile.multipliers + _CTRL_LANE_PRODUCTS * U + _CTRL_PRODUCTS,
                cells=D * tile.cells + _CTRL_LANE_CELLS * U + _CTRL_CELLS + _SIDE_CELLS
                + (_SLOT_CELLS if params.slots > 1 else 0) + _DXT_CELLS * (D - 1))


def _board(params: DxeParams) -> DxeBoard:
    """The engine as the board harness drives it (:class:`hdl.rdxe.hosted.DxeBoard`): the
    host's requests in one ordered stream, the plain inputs held at the reduced layer's
    (:func:`sim.rdxe.host.board_ports`: :func:`~sim.rdxe.host.board_layer`'s, whose loads the
    board vectors play)."""
    # Imported here: the host and the golden assembler double the registry's import time.
    from sim.rdxe.host import board_ports

    return DxeBoard(params.ctrl_config(), params.dxt_config(), inputs=board_ports(params),
                    slots=params.slots, dxts=params.dxts)


def _timing(params, component) -> dict[str, StreamTiming]:
    model = ("hdl.rdxe.ctrl.run_cycles with hdl.rdxe.dxtside.instruction_cycles and "
             "golden.rdxe.command_cycles (docs/rdxe.md 14.2 to 14.4)")
    always = StreamTiming(throughput=1.0, note="one transfer a cycle; always ready")
    streams = {
        "run": StreamTiming(model=model, note="one run of count instructions from pc; taken "
                                              "while idle" + ("; in the token's slot, which "
                                                              "restart starts at position"
                                                              if params.slots > 1 else "")),
        "done": StreamTiming(after="run", model=model, note="one per run, when its last result "
                                                            "is written or at the op that failed"),
        "ext": StreamTiming(throughput=1.0, note="a memory row read or written a cycle while the "
                                                 "DXE is idle (the host's loads and reads)"),
        "ext_data": StreamTiming(after="ext", latency=1, throughput=1.0,
                                 note="a host read's row, the cycle after; always ready"),
        "table": always,
        "wmem": StreamTiming(throughput=1.0, note="one WMEM row of one VAC a cycle" + (
            " (of DXT dxt)" if params.dxts > 1 else "")),
        "ppu": StreamTiming(throughput=1.0, note="one PPU entry a cycle; waits while an "
                                                 "attention writes its score entry"),
        # Several layers: each layer's score step (docs/rdxe.md 16.1).
        **({"scales": always} if params.layers > 1 else {}),
    }
    if isinstance(component, DxeBoard):      # the board form: ext and run in one stream
        del streams["ext"], streams["run"]
        streams["host"] = StreamTiming(throughput=1.0, note="ext requests and runs in order, "
                                                            "one a cycle; held while a run is out")
    return streams


register(Block(
    name="rdxe-dxe",
    family="rdxe",
    summary="rDXE decoder engine: a layer controller running a decoder layer's program (TB, "
            "rr-SRAM, quantizer, GPPU, SwiGLU, scalar path) and the DXT side with 1 to 8 DXTs",
    params=DxeParams,
    presets=_PRESETS,
    build=lambda p: Dxe(p.ctrl_config(), p.dxt_config(), slots=p.slots, dxts=p.dxts),
    golden="golden.rdxe.assemble",
    testbench="cocotb_tests.rdxe.dxe_tb",
    timing=_timing,
    size=_size,
    board=_board,
    # small fits the LFE5U-85F (137 of its 156 MULT18X18D, docs/rdxe.md 14.4);
    # the other two hold SmolLM2's layer, whose WMEM alone is 28.3 Mbit.
    synth=SynthSettings(presets=("small",),
                        skip_reason="synthesized at small only (memwall synth rdxe-dxe --preset "
                        "small --target ecp5): default and paper hold SmolLM2's layer, 29 and "
                        "31 Mbit of on-chip memory, an ASIC's (docs/rdxe.md 14.4)"),
))
