"""The rDXE VAC's configuration and stream layouts: a pure description, no hardware.

One :class:`VacConfig` is shared by the vector-accumulate core (:class:`~hdl.rdxe.vac.Vac`), the
HLINK source (:class:`~hdl.rdxe.vac.HlinkSource`), a DXT that chains them and the testbenches. It
checks every parameter once and derives the widths of the payloads:

* ``hlink`` (:func:`hlink_layout`): one ``lanes``-wide INT8 activation chunk and its control (the
  WMEM row it meets, the first and last chunk of an output, the output's PPU table entry, its
  RCU select, and the end of its RC factor).
* ``rc`` (:func:`rc_layout`): the broadcast RC factor, a ``rc_bits - 6``-bit unsigned significand
  and a 6-bit right shift: exactly the operands of the shared :class:`~hdl.arith.requant.
  Requantizer` (docs/rdxe_models.md section 2).
* ``wmem`` (:func:`wmem_layout`), ``ppu`` (:func:`ppu_layout`): loads of one WMEM row and of one
  PPU table entry.
* ``o`` (:func:`result_layout`): one INT8 output.

:class:`DxtConfig` (a tile) and :class:`VacConfig` (one VAC) are also the parameters of the golden
models (``golden.rdxe``), which take them as they are: one parameter object, checked once here.
(``hdl`` does not import ``golden``: the imports run the other way.)
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import signed, unsigned
from amaranth.lib import data

from ..arith.requant import CLAMPS, SHIFT_BITS
from ..validate import index_bits, integer, power_of_two

__all__ = ["VacConfig", "hlink_layout", "rc_layout", "wmem_layout", "ppu_layout", "kv_layout",
           "result_layout", "MAX_LANES", "MAX_DEPTH", "MAX_QUEUE", "MAX_OPERAND_STAGES", "ACC_BITS",
           "CODE_BITS", "MAX_GROUP_SIZE", "MAX_KV_GROUPS"]

#: Largest lane count (that of :class:`hdl.arith.idot.IntDot`).
MAX_LANES = 64
#: Largest GQA group size and KV group count of a DXT (the DXE controller's layer offsets are
#: sized by them).
MAX_GROUP_SIZE = MAX_KV_GROUPS = 64
#: Largest WMEM and PPU table depth (rows).
MAX_DEPTH = 1 << 20
#: Largest result queue (credits per VAC).
MAX_QUEUE = 1024
#: Most operand register stages between the WMEM and the lane tree.
MAX_OPERAND_STAGES = 8
#: Width of the accumulator and of the RCU output (INT32).
ACC_BITS = 32
#: Width of weights, activations and outputs (INT8).
CODE_BITS = 8


def check_config(cfg, kind: type, what: str):
    """Return ``cfg`` if it is a ``kind``: "VAC configuration must be a VacConfig, not 16"."""
    if not isinstance(cfg, kind):
        raise TypeError(f"{what} configuration must be a {kind.__name__}, not {cfg!r}")
    return cfg


def check_rc_clamp(rc_bits, clamp) -> None:
    """Check the RC factor width (16 to 30) and the INT8 clamp name shared by the VAC and the
    VE."""
    integer(rc_bits, "RC factor width", 16, 30)
    if clamp not in CLAMPS:
        raise ValueError(f"Clamp must be 'symmetric' or 'full', not {clamp!r}")


def check_fractions(norm_frac, prob_frac) -> None:
    """Check the fraction bits the RC factor keeps for RMSNorm and softmax (0 to 7 each), shared
    by the VE and the tile."""
    integer(norm_frac, "RMSNorm fraction bits", 0, 7)
    integer(prob_frac, "Probability fraction bits", 0, 7)


def kv_rows_check(value) -> int:
    """Return ``value`` if it is 0 (no KV cache) or a power of two from 2 to 2**20."""
    if not isinstance(value, int) or isinstance(value, bool) or not (
            value == 0 or (2 <= value <= MAX_DEPTH and value & (value - 1) == 0)):
        error = ValueError if isinstance(value, int) and not isinstance(value, bool) \
            else TypeError
        raise error(f"KV-cache row count must be 0 or a power of two between 2 and {MAX_DEPTH}, "
                    f"not {value!r}")
    return value


@dataclass(frozen=True)
class VacConfig:
    """Check and hold the parameters of one vector-accumulate core.

    Parameters
    ----------
    lanes : int
        INT8 multipliers, and bytes per WMEM row and HLINK chunk: a power of two from 1 to 64
        (16).
    wmem_depth : int
        WMEM rows of ``lanes`` bytes: 1 to 2**20 (1024: 16 KB at 16 lanes).
    ppu_depth : int or None
        PPU table entries (one multiplier and shift per output held in the WMEM): 1 to 2**20;
        ``None`` (default): ``wmem_depth``, enough for every set of outputs the WMEM can hold.
    mult_bits : int
        Width of the PPU's signed multiplier: 2 to 32 (32).
    clamp : str
        INT8 range of the PPU: ``"symmetric"`` [-127, 127] (default) or ``"full"`` [-128, 127].
    rc_bits : int
        Width of the RC factor: 16 to 30 (25): a ``rc_bits - 6``-bit significand and a 6-bit
        shift.
    kv_rows : int
        KV-cache rows of ``lanes`` bytes: 0 (no KV cache) or a power of two from 2 to 2**20
        (512: 8 KB at 16 lanes). K lives in the first half and V in the second
        (docs/rdxe_models.md section 6); a chunk flagged ``kv`` meets a KV-cache row instead of a
        WMEM row.
    queue_depth : int
        Results a VAC may owe, 3 to 1024 (32): the depth of its result queue and of its hold
        queue, and the credits a source starts with (:class:`~hdl.rdxe.vac.HlinkSource`). At
        least 3, the :class:`~hdl.pipeline.ResultQueue` minimum.
    operand_stages : int
        Registers between the WMEM read and the lane tree, for both operands: 1 to 8 (4). One
        is needed: the block RAM's clock-to-output leaves no time for a multiplier behind it.
        More give the placer room to reach DSP sites across the die (a VAC uses 24 of the
        LFE5U-25F's 28; the Fmax per count is in docs/rdxe.md section 9). They come before the
        cycle model's cycle 0 (``Vac.row_latency``).

    Raises
    ------
    TypeError, ValueError
        A message naming the parameter, the allowed values and the value given.
    """

    lanes: int = 16
    wmem_depth: int = 1024
    ppu_depth: int | None = None
    mult_bits: int = 32
    clamp: str = "symmetric"
    rc_bits: int = 25
    kv_rows: int = 512
    queue_depth: int = 32
    operand_stages: int = 4

    def __post_init__(self):
        power_of_two(self.lanes, "Lane count", 1, MAX_LANES)
        integer(self.wmem_depth, "WMEM depth", 1, MAX_DEPTH)
        if self.ppu_depth is None:
            object.__setattr__(self, "ppu_depth", self.wmem_depth)
        integer(self.ppu_depth, "PPU table depth", 1, MAX_DEPTH)
        integer(self.mult_bits, "PPU multiplier width", 2, 32)
        check_rc_clamp(self.rc_bits, self.clamp)
        kv_rows_check(self.kv_rows)
        integer(self.queue_depth, "Result queue depth", 3, MAX_QUEUE)
        integer(self.operand_stages, "Operand register stages", 1, MAX_OPERAND_STAGES)

    @property
    def rc_mant_bits(self) -> int:
        """Significand bits of the RC factor: ``rc_bits - 6``."""
        return self.rc_bits - SHIFT_BITS

    @property
    def row_bits(self) -> int:
        """Width of an HLINK row address: it names a WMEM row or a KV-cache row."""
        return index_bits(max(self.wmem_depth, self.kv_rows))

    @property
    def kv_row_bits(self) -> int:
        return index_bits(max(self.kv_rows, 1))

    @property
    def out_bits(self) -> int:
        return index_bits(self.ppu_depth)

    @property
    def out_limits(self) -> tuple[int, int]:
        """INT8 range of the outputs."""
        return (-127 if self.clamp == "symmetric" else -128), 127

    def kwargs(self) -> dict:
        return {"lanes": self.lanes, "wmem_depth": self.wmem_depth, "ppu_depth": self.ppu_depth,
                "mult_bits": self.mult_bits, "clamp": self.clamp, "rc_bits": self.rc_bits,
                "kv_rows": self.kv_rows, "queue_depth": self.queue_depth,
                "operand_stages": self.operand_stages}


def hlink_layout(cfg: VacConfig) -> data.StructLayout:
    """Payload of HLINK: one activation chunk and its control.

    ``data``: ``lanes`` INT8 activations (lane ``k`` is input ``j * lanes + k`` of chunk ``j``).
    ``row``: the WMEM row the chunk meets (``golden.rdxe.wmem_image``: ``p * C + j`` in pass
    ``p``), or with ``kv`` the KV-cache row (Q.K^T and P.V against the cache). ``first``: the
    output's first chunk (the accumulator starts from 0). ``last``: its
    last chunk (the accumulator is final). Read with ``last`` only: ``out``, the output's PPU
    table entry; ``rcu``, the output goes through the RCU before the PPU (fused RMSNorm or
    softmax) instead of straight to the PPU; ``rc_last``, with ``rcu``: the output is the last
    one to use the current RC factor (the next RCU output takes the next factor).
    """
    return data.StructLayout({
        "data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes),
        "row": unsigned(cfg.row_bits),
        "first": 1,
        "last": 1,
        "out": unsigned(cfg.out_bits),
        "rcu": 1,
        "rc_last": 1,
        "kv": 1,
    })


def rc_layout(cfg: VacConfig) -> data.StructLayout:
    """Payload of the RC factor broadcast: ``m`` (unsigned ``rc_bits - 6`` bits) and ``shift``
    (0 to 63): the factor ``m * 2**-shift`` of ``golden.rdxe.to_rc``."""
    return data.StructLayout({"m": unsigned(cfg.rc_mant_bits), "shift": unsigned(SHIFT_BITS)})


def wmem_layout(cfg: VacConfig) -> data.StructLayout:
    """Payload of a WMEM load: row ``addr`` gets ``data`` (``lanes`` INT8 weights, lane ``k``
    the weight of input ``j * lanes + k``): one row of ``golden.rdxe.wmem_image``."""
    return data.StructLayout({"addr": unsigned(cfg.row_bits),
                              "data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes)})


def ppu_layout(cfg: VacConfig) -> data.StructLayout:
    """Payload of a PPU table load: entry ``addr`` gets the multiplier ``m`` (signed
    ``mult_bits``) and the right ``shift`` (0 to 63) of one output."""
    return data.StructLayout({"addr": unsigned(cfg.out_bits), "m": signed(cfg.mult_bits),
                              "shift": unsigned(SHIFT_BITS)})


def kv_layout(cfg: VacConfig) -> data.StructLayout:
    """Payload of a KV-cache write: row ``addr`` gets lane ``k`` of ``data`` wherever ``en`` bit
    ``k`` is set (byte enables); the other bytes of the row keep their value."""
    return data.StructLayout({"addr": unsigned(cfg.kv_row_bits),
                              "data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes),
                              "en": unsigned(cfg.lanes)})


def result_layout(cfg: VacConfig) -> data.StructLayout:
    """Payload of ``o``: one INT8 output ``y`` in the ``clamp`` range."""
    return data.StructLayout({"y": signed(CODE_BITS)})


#: Bytes per GBUS transfer: the DXT's 32-bit global bus (paper Sec. III).
GBUS_BYTES = 4


@dataclass(frozen=True)
class VeConfig:
    """Check and hold the parameters of the vector engine (VE): the VRC half in each DXT.

    Parameters
    ----------
    lanes : int
        Activations per chunk, the VACs' lane count: a power of two from 4 to 64 (one GBUS word of
        4 scores must fit a chunk).
    rc_bits : int
        Width of the RC factor, 16 to 30 (25), as the VACs'.
    norm_frac, prob_frac : int
        Fraction bits ``F`` the RC factor keeps for RMSNorm (4) and softmax (7), 0 to 7
        (:class:`DxtConfig`'s).
    clamp : str
        INT8 range of the sequential mode's normalized activations: ``"symmetric"`` or
        ``"full"``, the VACs' PPU clamp.
    score_rows : int
        Rows of ``lanes`` INT8 scores in the score buffer: 1 to 2**16 (64). One head's Q.K^T
        writes at most ``score_rows * lanes`` scores.

    Raises
    ------
    TypeError, ValueError
        A message naming the parameter, the allowed values and the value given.
    """

    lanes: int = 16
    rc_bits: int = 25
    norm_frac: int = 4
    prob_frac: int = 7
    clamp: str = "symmetric"
    score_rows: int = 64

    def __post_init__(self):
        power_of_two(self.lanes, "VE lane count", GBUS_BYTES, MAX_LANES)
        check_rc_clamp(self.rc_bits, self.clamp)
        check_fractions(self.norm_frac, self.prob_frac)
        integer(self.score_rows, "Score buffer rows", 1, 1 << 16)

    @property
    def rc_mant_bits(self) -> int:
        return self.rc_bits - SHIFT_BITS

    @property
    def score_words(self) -> int:
        """GBUS words the score buffer holds."""
        return self.score_rows * self.lanes // GBUS_BYTES


def ve_tap_layout(cfg: VeConfig) -> data.StructLayout:
    """Payload of the VE's tap: one chunk of the stream the VACs consume (``data``), the first and
    last chunk of an operation's input, which sum it feeds (``softmax``: ``sum p``, else ``sum
    x**2``) and whether the factor is for the sequential mode (``seq``) rather than the RCUs.
    ``b`` is the sum's second operand, ``1`` in every lane with ``softmax``, else ``data``: the
    sender's register, so that the RC unit's products take their operands from flip-flops."""
    lanes = data.ArrayLayout(signed(CODE_BITS), cfg.lanes)
    return data.StructLayout({"data": lanes, "b": lanes,
                              "first": 1, "last": 1, "softmax": 1, "seq": 1})


def ve_rc_layout(cfg: VeConfig) -> data.StructLayout:
    """Payload of the VE's RC factor output: :func:`rc_layout`'s ``m`` and ``shift`` and the
    ``seq`` tag of the operation it belongs to."""
    return data.StructLayout({"m": unsigned(cfg.rc_mant_bits), "shift": unsigned(SHIFT_BITS),
                              "seq": 1})


#: Operations of the DXT's command stream.
OPS = ("gemv", "rmsnorm", "qk", "pv")
#: Where a GEMV's results go: the result stream, the KV cache as a key, or as a value.
DESTS = ("out", "key", "value")


@dataclass(frozen=True)
class KVGeometry:
    """The iWuR KV cache's shape: a pure description shared by the DXT and ``golden.rdxe``.

    Every VAC's cache has ``kv_rows`` rows of ``lanes`` bytes, K in the first half and V in the
    second; KV group ``g`` has rows ``g * group_rows .. (g + 1) * group_rows - 1`` of each half.
    A key takes ``key_rows = head_dim / lanes`` rows of its owner VAC ``t mod N``; a block of
    ``lanes`` tokens takes ``value_rows = ceil(head_dim / vacs)`` rows of each VAC (one per
    value channel it owns).
    """

    lanes: int
    vacs: int
    head_dim: int
    kv_rows: int
    kv_groups: int = 1

    @property
    def key_rows(self) -> int:
        """KV-cache rows per key: ``head_dim / lanes``."""
        return self.head_dim // self.lanes

    @property
    def value_rows(self) -> int:
        """Value channels per VAC, ``ceil(head_dim / vacs)``: V rows per block of ``lanes``
        tokens."""
        return -(-self.head_dim // self.vacs)

    @property
    def half_rows(self) -> int:
        """Rows of each KV-cache region (K first, then V): ``kv_rows / 2``."""
        return self.kv_rows // 2

    @property
    def group_rows(self) -> int:
        """Rows of each KV group in each half: ``kv_rows / 2 // kv_groups``."""
        return self.half_rows // self.kv_groups

    @property
    def capacity(self) -> int:
        """Tokens each KV group holds: ``min(N * (group_rows // key_rows), lanes * (group_rows
        // value_rows))``."""
        return min(self.vacs * (self.group_rows // self.key_rows),
                   self.lanes * (self.group_rows // self.value_rows))

    def check(self) -> None:
        """Check that each half holds one token of each group; the message names the need."""
        need = 2 * max(self.key_rows, self.value_rows) * self.kv_groups
        if self.kv_rows < need:
            each = "" if self.kv_groups == 1 else f" of each of {self.kv_groups} KV groups"
            raise ValueError(f"KV-cache row count must be at least {need} to hold one token"
                             f"{each} ({self.key_rows} key rows and {self.value_rows} value "
                             f"rows per half), not {self.kv_rows}")


def check_tile(p) -> None:
    """Check the tile-level fields of :class:`DxtConfig`: ``head_dim`` (a multiple of ``lanes``
    up to 1024), ``group_size``, ``kv_groups``, ``norm_frac``, ``prob_frac``, and a cache that
    holds one token of each group."""
    integer(p.head_dim, "Head dimension", p.lanes, 1024)
    if p.head_dim % p.lanes:
        raise ValueError(f"Head dimension must be a multiple of the lane count "
                         f"{p.lanes}, not {p.head_dim}")
    integer(p.group_size, "GQA group size", 1, MAX_GROUP_SIZE)
    integer(p.kv_groups, "KV group count", 1, MAX_KV_GROUPS)
    check_fractions(p.norm_frac, p.prob_frac)
    p.kv.check()


@dataclass(frozen=True)
class DxtConfig(VacConfig):
    """Check and hold the parameters of one decoder execution tile (DXT).

    The fields of :class:`VacConfig` (``lanes`` to ``operand_stages``) apply to every VAC; the
    tile adds:

    Parameters
    ----------
    vacs : int
        VACs on HLINK, ``N``: a power of two from 4 to 64 (16). At least 4: a GBUS word of 4
        results comes from 4 different VACs.
    head_dim : int
        Head dimension ``d``: a multiple of ``lanes`` from ``lanes`` to 1024 (64).
    group_size : int
        GQA group size ``G``, query heads per KV group: 1 to 64 (1).
    kv_groups : int
        KV groups the tile's caches hold: 1 to 64 (1). Query head ``h`` (of ``G * kv_groups``)
        reads group ``h // G``. Each group gets ``kv_rows / 2 // kv_groups`` rows of the K half
        and as many of the V half of every VAC's cache (:class:`KVGeometry`).
    norm_frac, prob_frac : int
        Fraction bits the RC factors keep for RMSNorm and softmax, 0 to 7 (4, 7).
    max_inputs : int
        Longest GEMV input ``K`` the token buffer holds: 1 to 65536 (4096).

    ``lanes`` must be 4 or more here (a GBUS word is 4 bytes of one KV-cache row) and
    ``kv_rows`` a power of two (the tile needs a KV cache).

    Raises
    ------
    TypeError, ValueError
        A message naming the parameter, the allowed values and the value given.
    """

    vacs: int = 16
    head_dim: int = 64
    group_size: int = 1
    kv_groups: int = 1
    norm_frac: int = 4
    prob_frac: int = 7
    max_inputs: int = 4096

    def __post_init__(self):
        # The tile's ranges of lanes and kv_rows first: their messages name the tile's range,
        # not one VAC's (which allows fewer lanes and no KV cache).
        power_of_two(self.lanes, "Lane count", GBUS_BYTES, MAX_LANES)
        power_of_two(self.kv_rows, "KV-cache row count", 2, MAX_DEPTH)
        super().__post_init__()
        power_of_two(self.vacs, "VAC count", GBUS_BYTES, 64)
        check_tile(self)
        integer(self.max_inputs, "Token buffer length", 1, 1 << 16)

    def vac_config(self) -> VacConfig:
        return VacConfig(**VacConfig.kwargs(self))

    def ve_config(self) -> VeConfig:
        return VeConfig(lanes=self.lanes, rc_bits=self.rc_bits, norm_frac=self.norm_frac,
                        prob_frac=self.prob_frac, clamp=self.clamp,
                        score_rows=-(-self.capacity // self.lanes))

    @property
    def kv(self) -> KVGeometry:
        return KVGeometry(self.lanes, self.vacs, self.head_dim, self.kv_rows, self.kv_groups)

    key_rows = property(lambda self: self.kv.key_rows)
    value_rows = property(lambda self: self.kv.value_rows)
    half_rows = property(lambda self: self.kv.half_rows)
    group_rows = property(lambda self: self.kv.group_rows)
    capacity = property(lambda self: self.kv.capacity)

    @property
    def heads(self) -> int:
        """Query heads: ``group_size * kv_groups``."""
        return self.group_size * self.kv_groups

    @property
    def chunks(self) -> int:
        """Chunks each half of the token buffer holds: the longest GEMV input and the longest
        P.V (one activation per token)."""
        return max(-(-self.max_inputs // self.lanes), -(-self.capacity // self.lanes))

    @property
    def max_outputs(self) -> int:
        """Most outputs of one GEMV: one PPU entry per pass and VAC."""
        return self.vacs * self.ppu_depth


def command_layout(cfg: DxtConfig) -> data.StructLayout:
    """Payload of a DXT command (``cmd``).

    ``op``: index into :data:`OPS`. ``seq``: the sequential mode (RMSNorm, P.V) instead of the
    fused one. ``dest``: index into :data:`DESTS` (GEMV and RMSNorm). ``outputs``, ``chunks``:
    ``M`` and ``C = ceil(K / lanes)`` of a GEMV. ``row``: its first WMEM row (output ``o`` on
    VAC ``o mod N`` in pass ``p = o // N`` reads rows ``row + p C .. row + p C + C - 1``).
    ``entry``: the first PPU entry (pass ``p`` uses ``entry + p``; Q.K^T uses ``entry`` for
    every score). ``head``: the query head (Q.K^T, P.V) or the KV group a key or value goes to.
    ``tokens``: the token a key or value belongs to, or ``T``, the tokens of Q.K^T and P.V.
    ``inv_k``, ``eps``: fp32 ``fp32(1/K)`` and the RMSNorm epsilon ``eps_q``. ``scale``: fp32
    ``log2(e)`` times one score step (P.V).
    """
    return data.StructLayout({
        "op": unsigned(2), "seq": 1, "dest": unsigned(2),
        "outputs": unsigned(index_bits(cfg.max_outputs + 1)),
        "chunks": unsigned(index_bits(cfg.chunks + 1)),
        "row": unsigned(index_bits(cfg.wmem_depth)),
        "entry": unsigned(index_bits(cfg.ppu_depth)),
        "head": unsigned(index_bits(max(cfg.heads, cfg.kv_groups))),
        "tokens": unsigned(index_bits(cfg.capacity + 1)),
        "inv_k": 32, "eps": 32, "scale": 32,
    })


def chunk_layout(lanes: int) -> data.StructLayout:
    """Payload of a token chunk (``x``): ``lanes`` INT8 activations."""
    return data.StructLayout({"data": data.ArrayLayout(signed(CODE_BITS), lanes)})


def word_layout() -> data.StructLayout:
    """Payload of the DXT's results (``o``): one GBUS word of up to 4 INT8 results in output
    order, ``keep`` marking those that exist, ``last`` the operation's last word."""
    return data.StructLayout({"data": data.ArrayLayout(signed(CODE_BITS), GBUS_BYTES),
                              "keep": GBUS_BYTES, "last": 1})


def response_layout() -> data.StructLayout:
    """Payload of a command's response (``resp``): ``error`` set when the command was refused
    (a key or value past the KV cache's capacity, or a bad operand) and did nothing."""
    return data.StructLayout({"error": 1})
