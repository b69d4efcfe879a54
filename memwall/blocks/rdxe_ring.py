"""Registry entry of the ring of rDXE decoder engines (``rdxe-ring``): ``dxes`` engines of
``rdxe-dxe`` in a line, tokens of several requests passing them as their TB input rows
(:class:`hdl.rdxe.ring.Ring`, docs/rdxe.md 16.3 and 16.4)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from hdl.rdxe.ctrl import Store
from hdl.rdxe.ring import MAX_ROWS, Ring
from hdl.validate import integer

from ..registry import Block, Size, StreamTiming, SynthSettings, register
from .rdxe_dxe import _PRESETS as _DXE_PRESETS
from .rdxe_dxe import DxeParams, _size as _dxe_size
from .rdxe_dxe import _timing as _dxe_timing


@dataclass(frozen=True)
class RingParams(DxeParams):
    """Every DXE's parameters (:class:`DxeParams`: its DXT, its controller's space, its
    ``layers`` and ``slots``), the ring's size and the rows a token moves.

    Parameters
    ----------
    dxes : int
        DXEs in the ring, 1 to 8 (the paper's Fig. 3 has 4); each holds ``layers`` layers.
    rows : int
        TB rows a token moves between DXEs: the first ``rows`` rows of the TB, where the layer
        program assembled to loop places its inputs (the residual, ``cos``, ``sin``, each on a
        row of ``lanes``); 1 to the TB's rows and to 256.
    """

    dxes: int = 2
    rows: int = 6

    def dxe_params(self) -> DxeParams:
        """One DXE's parameters (the ``rdxe-dxe`` entry's)."""
        return DxeParams(**{f.name: getattr(self, f.name) for f in fields(DxeParams)})


def _build(p: RingParams) -> Ring:
    if p.dxts != 1:          # DxeParams' field; Ring builds one-DXT engines (docs/rdxe.md 16.5)
        raise ValueError(f"A ring's DXEs hold one DXT each: dxts must be 1, not {p.dxts}")
    ctrl = p.ctrl_config()
    rows = integer(p.rows, "Token rows", 1, min(MAX_ROWS, ctrl.rows(Store.TB)))
    return Ring(ctrl, p.dxt_config(), dxes=p.dxes, slots=p.slots, rows=range(rows))


def _ring(dxe: DxeParams, **changes) -> RingParams:
    """A ring of ``dxe``'s engines with ``changes`` (its own fields and the DXE's)."""
    return RingParams(**{**{f.name: getattr(dxe, f.name) for f in fields(DxeParams)},
                         **changes})


#: The DXE's small preset with a KV group for each of 2 slots (and 2 layers, ``default`` and
#: ``paper``): the reduced layer's tables and constants stacked a layer at the program's stride,
#: as cocotb_tests/test_rdxe_dxe.py's two-layer case sizes them.
_SMALL_DXE = _DXE_PRESETS["small"]
_LOOPED = dict(wmem_depth=512, ppu_depth=128, const_words=384, gemvs=9, layers=2, slots=2,
               kv_groups=4)

_PRESETS = {
    # 2 DXEs of the DXE's small preset, a layer each, 2 slots (a KV group each): the reduced
    # layer's inputs are 6 rows of 4 lanes (h 16, cos 4, sin 4). make test's cocotb case.
    "small": _ring(_SMALL_DXE, slots=2, kv_groups=2, dxes=2, rows=6),
    # 2 DXEs of 2 layers each for 2 resident requests (2 x 2 KV groups a DXE): the ring of
    # docs/rdxe.md 16.3's measurements, 4 layers of the reduced layer.
    "default": _ring(_SMALL_DXE, **_LOOPED, dxes=2, rows=6),
    # The paper's ring of 4 DXEs (Fig. 3), 2 layers each, on the small tile: the paper's DXE at
    # SmolLM2's sizes is 31.2 Mbit and 1,099 multipliers (rdxe-dxe paper, one DXT), so 2 of
    # them are over the size guard's 32 Mibit and 4 over its 4,096 multipliers (docs/rdxe.md
    # 16.4).
    "paper": _ring(_SMALL_DXE, **_LOOPED, dxes=4, rows=6),
}


#: Netlist cells of the ring besides its DXEs: a link (its write port, full flag and token
#: fields) and a stage (its state machine, row counter and the DXE's ext shared with the host).
#: At small the estimate is 30,990 cells and the netlist has 30,929 (session 23).
_LINK_CELLS, _STAGE_CELLS = 12, 60


def _size(p: RingParams) -> Size:
    """``dxes`` DXEs (:func:`~memwall.blocks.rdxe_dxe._size`), ``dxes + 1`` links of ``rows``
    TB rows, and each stage's table of the rows it copies (a ROM of TB row addresses)."""
    dxe, ctrl = _dxe_size(p.dxe_params()), p.ctrl_config()
    row_bits = (ctrl.rows(Store.TB) - 1).bit_length() or 1
    links = (p.dxes + 1) * p.rows * ctrl.data_bits
    stages = p.dxes * p.rows * max(row_bits, max(
        (ctrl.rows(s) - 1).bit_length() for s in Store))
    return Size(storage_bits=p.dxes * dxe.storage_bits + links + stages,
                multipliers=p.dxes * dxe.multipliers,
                cells=p.dxes * (dxe.cells + _STAGE_CELLS) + (p.dxes + 1) * _LINK_CELLS)


def _timing(params: RingParams, component) -> dict[str, StreamTiming]:
    model = ("sim.rdxe.ring.schedule with copy=rows (hdl.rdxe.ring.copy_cycles, docs/rdxe.md "
             "16.3)")
    dxe = _dxe_timing(params.dxe_params(), None)
    host = {f"dxe__{d}__{name}": timing for d in range(params.dxes)
            for name, timing in dxe.items() if name in component.host_ports}
    for d in range(params.dxes):
        host[f"dxe__{d}__ext_data"] = StreamTiming(
            after=f"dxe__{d}__ext", latency=1, throughput=1.0,
            note="a host read's row, the cycle after; always ready")
        host[f"dxe__{d}__ext"] = StreamTiming(
            throughput=1.0, note="a memory row of DXE d read or written a cycle, before tokens "
                                 "run (the stage takes the DXE's ext while it copies)")
    return {
        "input": StreamTiming(throughput=1.0, model=model,
                              note="a token's rows, one a beat, taken while the first link is "
                                   "empty"),
        "output": StreamTiming(after="input", model=model,
                               note="the last DXE's rows of a token, one a beat; back-pressure "
                                    "holds the last DXE's done, and so the DXEs before it"),
        **host,
    }


register(Block(
    name="rdxe-ring",
    family="rdxe",
    summary="Ring of rDXE decoder engines: dxes DXEs in a line, each holding layers layers of "
            "slots resident requests, tokens moving between them as their TB input rows",
    params=RingParams,
    presets=_PRESETS,
    build=_build,
    golden="golden.rdxe.ring",
    testbench="cocotb_tests.rdxe.ring_tb",
    timing=_timing,
    size=_size,
    synth=SynthSettings(targets=(), skip_reason="a DXE at small needs 137 MULT18X18D of the "
                        "LFE5U-85F's 156 (rdxe-dxe, docs/rdxe.md 14.4); the ring has dxes of "
                        "them"),
))
