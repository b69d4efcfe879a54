"""Assemble a DXE layer program into instruction words, and run the words (docs/rdxe.md, 14.1).

:func:`assemble` turns a program of :mod:`golden.rdxe.program` (operations on named regions)
into the controller's instruction words (:mod:`hdl.rdxe.isa`): every region becomes an address in
the token buffer (TB) or the rr-SRAM, every scalar a register, every table a constant-memory
address or a GEMV table index. Storage is reused: a region's value lives from the operation that
writes it to the last one that reads it, and values whose lives overlap never share a place (an
operation's result never overlaps its operands, so any pipeline may read ahead of its writes).

:func:`run_words` decodes each word back into the operation it stands for, on flat memories
(:class:`Flat`: a region is an ``(address, count)`` pair), and runs it with the same golden step as
the named program. That the two runs agree bit for bit (tests/test_rdxe_assemble.py, and on a real
SmolLM2 layer tests/test_llm_rdxe.py) is what shows the words hold the whole program.

A DXE that holds several layers runs one layer's words once per layer (docs/rdxe.md, section
16): :func:`assemble`'s ``in_place`` and ``keep`` make the words loop (the residual's output at
its input's address, RoPE's table live to the end), :func:`stacked_tables` lays the layers'
tables out at the :class:`Stride` a layer register adds, and :func:`run_words` runs layer ``l``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hdl.rdxe.isa import OPCODES, ProgramSpace, instruction_layout

from . import program as P

__all__ = ["Flat", "Assembled", "Stride", "assemble", "decode", "flat_tables", "stacked_tables",
           "stride", "new_state", "run_words"]


class Flat:
    """A flat memory seen as regions: ``m[(address, count)]`` is a copy of the ``count`` elements
    from ``address`` (a value, as a named region's is); assigning to it writes them (the count
    must match)."""

    def __init__(self, words: np.ndarray):
        self.words = words

    def __contains__(self, key) -> bool:
        a, n = key
        return 0 <= a and a + n <= len(self.words)

    def __getitem__(self, key) -> np.ndarray:
        if key not in self:
            raise KeyError(f"region {key} is outside a memory of {len(self.words)} elements")
        a, n = key
        return self.words[a:a + n].copy()

    def __setitem__(self, key, value) -> None:
        value = np.asarray(value)
        if key not in self or value.shape != (key[1],):
            raise ValueError(f"region {key} of a memory of {len(self.words)} elements cannot take "
                             f"shape {value.shape}")
        self.words[key[0]:key[0] + key[1]] = value


# --- what each operation reads and writes ---------------------------------------------------------


@dataclass(frozen=True)
class _Access:
    """One operation's storage: region reads ``(store, name, part)``, the write ``(store, name,
    count)``, registers read and written, constant tables read (adjacent, in order)."""

    reads: tuple = ()
    write: tuple | None = None
    regs_in: tuple = ()
    reg_out: str | None = None
    consts: tuple = ()


def _access(op, length) -> _Access:
    """The storage of ``op``; ``length(store, name, part)`` gives a read's element count."""
    if isinstance(op, P.Max):
        return _Access(reads=(("tb", op.src, None),), reg_out=op.dst)
    if isinstance(op, P.Recip):
        return _Access(regs_in=(op.src,), reg_out=op.dst)
    if isinstance(op, P.Eps):
        return _Access(regs_in=(op.k,), reg_out=op.dst)
    if isinstance(op, P.Score):
        return _Access(regs_in=(op.top,), reg_out=op.dst, consts=(op.const,))
    if isinstance(op, P.Quant):
        n = length("tb", op.src, op.part)
        return _Access(reads=(("tb", op.src, op.part),), write=("rr", op.dst, n),
                       regs_in=() if op.k is None else (op.k,),
                       consts=() if op.table is None else (op.table,))
    if isinstance(op, P.Gemv):
        return _Access(reads=(("rr", op.src, None),), write=("rr", op.dst, None),
                       regs_in=() if op.eps is None else (op.eps,), consts=())
    if isinstance(op, P.Dequant):
        return _Access(reads=(("rr", op.src, None),), write=("tb", op.dst, length("rr", op.src)),
                       regs_in=() if op.top is None else (op.top,), consts=(op.table,))
    if isinstance(op, P.Rope):
        return _Access(reads=(("tb", op.src, op.part), ("tb", op.cos, None), ("tb", op.sin, None)),
                       write=("tb", op.dst, length("tb", op.src, op.part)))
    if isinstance(op, P.Add):
        return _Access(reads=(("tb", op.a, None), ("tb", op.b, None)),
                       write=("tb", op.dst, length("tb", op.a)))
    if isinstance(op, P.KvAppend):
        return _Access(reads=(("rr", op.keys, None), ("rr", op.values, None)))
    if isinstance(op, P.Attend):
        return _Access(reads=(("rr", op.q, None),), write=("rr", op.dst, length("rr", op.q)),
                       regs_in=(op.score,))
    if isinstance(op, P.ActMax):
        return _Access(reads=(("rr", op.src, None),), reg_out=op.dst, consts=(op.a, op.c))
    if isinstance(op, P.Act):
        return _Access(reads=(("rr", op.src, None),),
                       write=("rr", op.dst, length("rr", op.src) // 2), regs_in=(op.k,),
                       consts=(op.a, op.c))
    raise TypeError(f"not a program operation: {op!r}")


# --- allocation ---------------------------------------------------------------------------------


def _first_fit(values: list, align: int = 1, pinned: dict | None = None) -> dict:
    """Addresses for ``values`` (``(key, first, last, count)``, live from operation ``first`` to
    ``last``): the lowest free multiple of ``align``, never shared with a value live at the same
    time. The inputs (``first < 0``) go first, in order; then the ``pinned`` values (key -> an
    input's key), each at its input's address (:func:`assemble` checks the two never live at
    once); then the largest values first (first-fit decreasing: a large value placed late finds
    no gap and goes on top)."""
    placed, where, pinned = [], {}, pinned or {}
    order = sorted(values, key=lambda v: (0, v[1], 0) if v[1] < 0 else
                   (1, 0, 0) if v[0] in pinned else (2, -v[3], v[1]))
    for key, first, last, count in order:
        busy = sorted((a, a + n) for (f, l, a, n) in placed if f <= last and first <= l)
        if key in pinned:
            where[key] = where[pinned[key]]
            placed.append((first, last, where[key], count))
            continue
        address = 0
        for a, b in busy:
            if address + count <= a:
                break
            address = max(address, -(-b // align) * align)
        where[key] = address
        placed.append((first, last, address, count))
    return where


@dataclass
class _Lives:
    """Each value's life (store, name, version) -> [first, last, count] and the version each
    operation reads."""

    lives: dict
    current: dict

    def read(self, store: str, name: str, i: int):
        key = self.current.get((store, name))
        if key is None:
            held = sorted(n for s, n in self.current if s == store)
            raise ValueError(f"operation {i} reads {store} region {name!r} before anything writes "
                             f"it; {store} holds {held}")
        self.lives[key][1] = max(self.lives[key][1], i)
        return key

    def write(self, store: str, name: str, i: int, count: int):
        key = (store, name, i)
        self.lives[key] = [i, i, count]
        self.current[(store, name)] = key
        return key


def _liveness(program, inputs: dict, gemv_shapes: dict) -> tuple[_Lives, list]:
    """Walk ``program``: every value's life and, per operation, its access and the values it
    reads and writes."""
    lives = _Lives({}, {})
    for name, count in inputs.items():
        lives.write("tb", name, -1, count)

    def length(store, name, part=None):
        count = lives.lives[lives.current[(store, name)]][2] if (store, name) in lives.current \
            else 0
        return count if part is None else part[1] - part[0]
    steps = []
    for i, op in enumerate(program):
        acc = _access(op, length)
        read = [lives.read(s, n, i) for s, n, _ in acc.reads]
        regs = [lives.read("reg", r, i) for r in acc.regs_in]
        wrote = None
        if acc.write is not None:
            store, name, count = acc.write
            if isinstance(op, P.Gemv):
                count, k = gemv_shapes[op.name]
                if length("rr", op.src) != k:
                    raise ValueError(f"operation {i}: GEMV {op.name!r} takes {k} inputs, region "
                                     f"{op.src!r} holds {length('rr', op.src)}")
            wrote = lives.write(store, name, i, count)
        reg = None if acc.reg_out is None else lives.write("reg", acc.reg_out, i, 1)
        steps.append((acc, read, regs, wrote, reg))
    return lives, steps


# --- the assembled program ----------------------------------------------------------------------


@dataclass(frozen=True)
class Assembled:
    """An assembled program: ``words`` (one instruction each), the ``space`` they address, the
    TB addresses of the ``inputs`` and ``outputs``, the constant memory's layout (``consts``:
    table name -> address) and GEMV table indices (``gemvs``), ``head_dim``, the storage used
    (``used``: TB words, rr-SRAM bytes, registers, constant words), and the options it was
    assembled with (``in_place``, ``keep``: :func:`assemble`)."""

    words: tuple
    space: ProgramSpace
    inputs: dict
    outputs: dict
    consts: dict
    gemvs: dict
    head_dim: int
    used: dict
    in_place: tuple = ()
    keep: tuple = ()


def _pack(space: ProgramSpace, **fields) -> int:
    layout = instruction_layout(space)
    word = {name: 0 for name, _ in layout}
    word.update(fields)
    return layout.const(word).as_value().value


def _fields(op, step, where: dict, regs: dict, consts: dict, gemvs: dict) -> dict:
    """The instruction fields of ``op`` from its values' places (module notes of hdl.rdxe.isa);
    ``step`` is its access and values from :func:`_liveness`."""
    acc, read, reg_in, wrote, reg_out = step
    f = {"r_in": regs[reg_in[0]] if reg_in else 0,
         "r_out": 0 if reg_out is None else regs[reg_out]}
    if read:
        part = acc.reads[0][2]
        f["a"] = where[read[0]] + (0 if part is None else part[0])
    if len(read) > 1:
        f["b"] = where[read[1]]
    if wrote is not None:
        f["dst"] = where[wrote]
    if acc.consts:
        f["table"] = consts[acc.consts[0]]
    name = type(op).__name__
    opcode = {"Quant": "quant" if getattr(op, "k", None) is not None else "quant_table",
              "Gemv": "gemv" if getattr(op, "eps", None) is None else "gemv_norm",
              "Dequant": "dequant" if getattr(op, "top", None) is None else "dequant_token",
              "KvAppend": "kv_append", "ActMax": "act_max"}.get(name, name.lower())
    if name == "Gemv":
        f["table"] = gemvs[op.name]
    return {"op": OPCODES.index(opcode), **f}


def _counts(op, step, lives: _Lives) -> int:
    """The instruction's ``n``: the result's count, or what it reads when it writes no region
    (the gate's count for the activation)."""
    acc, read, _, wrote, _ = step
    if wrote is not None:
        return lives.lives[wrote][2]
    if not read:
        return 0
    part = acc.reads[0][2]
    n = lives.lives[read[0]][2] if part is None else part[1] - part[0]
    return n // 2 if isinstance(op, P.ActMax) else n


def _check_adjacent(program, steps, where, consts, tables) -> None:
    """The pairs an instruction addresses as one: RoPE's sin right after its cos in the TB, the
    activation's ``c`` right after its ``a`` in the constant memory."""
    for op, (acc, read, *_rest) in zip(program, steps):
        if isinstance(op, P.Rope) and where[read[2]] != where[read[1]] + op.head_dim // 2:
            raise ValueError(f"RoPE needs {op.sin!r} right after {op.cos!r} in the token buffer; "
                             f"give them as adjacent inputs")
        if isinstance(op, (P.ActMax, P.Act)) and \
                consts[op.c] != consts[op.a] + len(tables.vectors[op.a]):
            raise ValueError(f"the activation needs table {op.c!r} right after {op.a!r}; a program "
                             f"reads {op.a!r} alone before")


def _const_layout(program, tables: P.LayerTables, align: int = 1) -> tuple[dict, int]:
    """Constant-memory addresses of the tables ``program`` reads, in order of first use (an
    operation's tables adjacent), each at a multiple of ``align`` (a scalar takes a row)."""
    consts, top = {}, 0
    for op in program:
        for name in _access(op, lambda *a: 0).consts:
            if name not in consts:
                consts[name] = top
                top += -(-(1 if name in tables.scalars else len(tables.vectors[name])) // align) \
                    * align
    return consts, top


def _check_rows(values: list, align: int, store: str) -> None:
    """Every value of ``store`` (but a register) a whole number of rows of ``align``."""
    for (_, name, _), _, _, count in values:
        if store != "reg" and count % align:
            raise ValueError(f"{store} region {name!r} holds {count} elements, not a whole number "
                             f"of rows of {align}")


def _check_parts(program, align: int) -> None:
    """Every part an operation reads starts and ends on a row."""
    for op in program:
        part = getattr(op, "part", None)
        if part is not None and (part[0] % align or part[1] % align):
            raise ValueError(f"{type(op).__name__} of {op.src!r} reads elements {part[0]} to "
                             f"{part[1]}, not whole rows of {align}")


def _loop(lives: _Lives, inputs: dict, outputs, in_place, keep, end: int) -> dict:
    """Keep the inputs ``keep`` live to the program's ``end``; return the pinned TB values: each
    output of ``in_place`` at its input's place. Raises ValueError naming what cannot be."""
    for name in keep:
        if name not in inputs:
            raise ValueError(f"keep names {name!r}, which is not an input; the inputs are "
                             f"{list(inputs)}")
        lives.lives[("tb", name, -1)][1] = end
    pinned = {}
    for name in in_place:
        if name not in inputs or name not in outputs:
            raise ValueError(f"in_place names {name!r}, which is not both an input and an "
                             f"output; the inputs are {list(inputs)}, the outputs {list(outputs)}")
        source, (first, _, count) = ("tb", name, -1), lives.lives[lives.current[("tb", name)]]
        last = lives.lives[source][1]
        if lives.current[("tb", name)] == source:
            raise ValueError(f"in_place names {name!r}, which no operation writes")
        if count != inputs[name]:
            raise ValueError(f"output {name!r} holds {count} elements and input {name!r} "
                             f"{inputs[name]}: they cannot share a place")
        if last >= first:
            raise ValueError(f"output {name!r} cannot take the place of input {name!r}: the input "
                             f"is live until operation {last}, the output written by operation "
                             f"{first}")
        pinned[lives.current[("tb", name)]] = source
    return pinned


def assemble(program, tables: P.LayerTables, inputs: dict, outputs, space: ProgramSpace,
             head_dim: int, *, in_place=(), keep=()) -> Assembled:
    """Assemble ``program`` for ``space``. ``inputs``: the token buffer regions the host writes
    (name -> count), placed first, in order; ``outputs``: the TB regions read after the last
    operation. ``tables`` gives the GEMVs' shapes and the constants' sizes.

    For a program that loops over layers (docs/rdxe.md, section 16): ``in_place`` names outputs
    placed at their input's address (the residual flows to the next layer in place; the input
    must be dead when the output is written), ``keep`` names inputs that stay live and unchanged
    to the program's end (RoPE's ``cos`` and ``sin``, read by every layer).

    Raises ValueError naming what does not fit or cannot be placed."""
    gemv_names = list(dict.fromkeys(op.name for op in program if isinstance(op, P.Gemv)))
    gemvs = {name: i for i, name in enumerate(gemv_names)}
    lives, steps = _liveness(program, inputs,
                             {name: tables.gemvs[name][0].shape for name in gemv_names})
    end = len(program)
    for name in outputs:
        lives.read("tb", name, end)
    pinned = _loop(lives, inputs, outputs, in_place, keep, end)
    where = {}
    for store in ("tb", "rr", "reg"):
        values = [(k, f, l, n) for k, (f, l, n) in lives.lives.items() if k[0] == store]
        if store == "tb":      # the inputs first, in order, as the host writes them
            values = [(k, -1 - len(inputs) + j, l, n) if f == -1 else (k, f, l, n)
                      for j, (k, f, l, n) in enumerate(values)]
        _check_rows(values, space.align, store)
        where.update(_first_fit(values, space.align if store != "reg" else 1,
                                pinned if store == "tb" else None))
    regs = {k: a for k, a in where.items() if k[0] == "reg"}
    _check_parts(program, space.align)
    consts, const_words = _const_layout(program, tables, space.align)
    used = {"tb_words": _top(lives, where, "tb"), "rr_bytes": _top(lives, where, "rr"),
            "registers": _top(lives, where, "reg"), "const_words": const_words}
    room = {"tb_words": space.tb_words, "rr_bytes": space.rr_bytes,
            "registers": space.registers, "const_words": space.const_words}
    for what, need in used.items():
        if need > room[what]:
            raise ValueError(f"the program needs {need:,} {what.replace('_', ' ')}; the space has "
                             f"{room[what]:,}")
    if len(gemvs) > space.gemvs:
        raise ValueError(f"the program uses {len(gemvs)} GEMV tables; the space has {space.gemvs}")
    _check_adjacent(program, steps, where, consts, tables)
    words = tuple(_pack(space, n=_counts(op, step, lives),
                        **_fields(op, step, where, regs, consts, gemvs))
                  for op, step in zip(program, steps))
    return Assembled(words, space, {name: where[("tb", name, -1)] for name in inputs},
                     {name: where[lives.current[("tb", name)]] for name in outputs},
                     consts, gemvs, head_dim, used, tuple(in_place), tuple(keep))


def _top(lives: _Lives, where: dict, store: str) -> int:
    return max((where[k] + n for k, (_, _, n) in lives.lives.items() if k[0] == store), default=0)


# --- running the words --------------------------------------------------------------------------


@dataclass(frozen=True)
class Stride:
    """What the layer register adds for layer ``l`` of a program that loops over layers
    (docs/rdxe.md, section 16): ``l * gemvs`` to every GEMV table index, ``l * const_words`` to
    every constant address, and ``l * kv_groups`` (plus the request's base) to every KV group the
    DXT side addresses (``l * kv_groups * G`` to its query heads, ``G`` heads a group)."""

    gemvs: int
    const_words: int
    kv_groups: int


def stride(asm: Assembled) -> Stride:
    """The layer stride of ``asm``: its GEMV tables, its constant words (whole rows), and the KV
    groups its ``kv_append`` writes (its keys' count over ``head_dim``)."""
    layout = instruction_layout(asm.space)
    appends = [f.n for f in map(layout.from_bits, asm.words) if OPCODES[f.op] == "kv_append"]
    return Stride(len(asm.gemvs), asm.used["const_words"], appends[0] // asm.head_dim if appends
                  else 0)


def decode(word: int, asm: Assembled, gemv_shapes: dict, layer: int = 0,
           step: Stride | None = None):
    """The operation instruction ``word`` stands for, on flat memories: regions are ``(address,
    count)``, registers their index, GEMVs their table index (``gemv_shapes``: index -> (M,
    K)); for ``layer`` the table index and constant address moved by ``step`` (by default
    :func:`stride` of ``asm``)."""
    f = instruction_layout(asm.space).from_bits(word)
    step = step or (stride(asm) if layer else Stride(0, 0, 0))
    op, a, b, dst, n = OPCODES[f.op], f.a, f.b, f.dst, f.n
    r_in, r_out, d = f.r_in, f.r_out, asm.head_dim
    if op in ("gemv", "gemv_norm"):
        table = f.table + layer * step.gemvs
        return P.Gemv(table, (a, gemv_shapes[table][1]), (dst, n),
                      eps=r_in if op == "gemv_norm" else None)
    table = f.table + layer * step.const_words
    return {
        "max": lambda: P.Max((a, n), r_out),
        "recip": lambda: P.Recip(r_in, r_out),
        "eps": lambda: P.Eps(r_in, r_out),
        "score": lambda: P.Score(r_in, r_out, const=(table, 1)),
        "quant": lambda: P.Quant((a, n), (dst, n), k=r_in),
        "quant_table": lambda: P.Quant((a, n), (dst, n), table=(table, n)),
        "dequant": lambda: P.Dequant((a, n), (dst, n), (table, n)),
        "dequant_token": lambda: P.Dequant((a, n), (dst, n), (table, n), top=r_in),
        "rope": lambda: P.Rope((a, n), (dst, n), d, cos=(b, d // 2), sin=(b + d // 2, d // 2)),
        "add": lambda: P.Add((a, n), (b, n), (dst, n)),
        "kv_append": lambda: P.KvAppend((a, n), (b, n), d),
        "attend": lambda: P.Attend((a, n), r_in, (dst, n), d),
        "act_max": lambda: P.ActMax((a, 2 * n), r_out, a=(table, n), c=(table + n, n)),
        "act": lambda: P.Act((a, 2 * n), r_in, (dst, n), a=(table, n), c=(table + n, n)),
    }[op]()


class _Scalars:
    """The constant memory's scalars: ``s[(address, 1)]`` is the word at ``address``."""

    def __init__(self, words: np.ndarray):
        self.words = words

    def __getitem__(self, key) -> np.uint32:
        return self.words[key[0]]


def flat_tables(tables: P.LayerTables, asm: Assembled) -> P.LayerTables:
    """``tables`` as the assembled program sees them: GEMVs by table index, the constants in one
    fp32 memory laid out as ``asm.consts`` says."""
    return _flat([tables], asm, asm.space.const_words)


def stacked_tables(layers, asm: Assembled) -> list[P.LayerTables]:
    """The tables of several layers (a sequence of :class:`~golden.rdxe.program.LayerTables` of
    one shape) as one DXE holds them, so that ``asm``'s words run any of them: layer ``l``'s
    GEMVs at table indices from ``l * stride.gemvs``, its constants laid out as ``asm.consts``
    says from ``l * stride.const_words`` (:func:`stride`). Returns each layer's view: the same
    GEMVs and constant memory, the layer's own ``score_scale`` (a layer's score step is its
    own). Raises TypeError for what is not a sequence of tables, ValueError for layers whose
    ``rms_eps``, DXT or VRC mode differ (the DXE holds one)."""
    layers = list(layers) if isinstance(layers, (list, tuple)) else None
    if not layers or not all(isinstance(t, P.LayerTables) for t in layers):
        raise TypeError("Layers must be a non-empty list of LayerTables")
    for l, t in enumerate(layers):
        for name in ("rms_eps", "params", "mode"):
            if getattr(t, name) != getattr(layers[0], name):
                raise ValueError(f"layer {l}'s {name} must be layer 0's (a DXE holds one), not "
                                 f"{getattr(t, name)!r}")
    flat = _flat(layers, asm, len(layers) * stride(asm).const_words)
    return [replace(flat, score_scale=t.score_scale) for t in layers]


def _flat(layers: list, asm: Assembled, const_words: int) -> P.LayerTables:
    """``layers`` laid out one after another by :func:`stride` in memories of ``const_words``."""
    step = stride(asm)
    const = np.zeros(const_words, np.uint32)
    gemvs = {}
    for l, tables in enumerate(layers):
        gemvs.update({l * step.gemvs + i: tables.gemvs[name] for name, i in asm.gemvs.items()})
        for name, address in asm.consts.items():
            value = np.atleast_1d(np.asarray(tables.scalars[name] if name in tables.scalars
                                             else tables.vectors[name], np.uint32))
            start = l * step.const_words + address
            const[start:start + len(value)] = value
    return replace(layers[0], gemvs=gemvs, vectors=Flat(const), scalars=_Scalars(const))


def new_state(asm: Assembled) -> P.DxeState:
    """A DXE's empty storage for ``asm``: the TB and rr-SRAM as flat memories."""
    return P.DxeState(tb=Flat(np.zeros(asm.space.tb_words, np.uint32)),
                      rr=Flat(np.zeros(asm.space.rr_bytes, np.int8)))


def run_words(asm: Assembled, state: P.DxeState, tables: P.LayerTables, layer: int = 0
              ) -> P.DxeState:
    """Run ``asm``'s words on ``state`` (:func:`new_state`) with ``tables`` as
    :func:`flat_tables` gives them, or with layer ``layer``'s view of :func:`stacked_tables`
    (the KV cache is ``state``'s: the caller gives it the layer's)."""
    shapes = {i: w.shape for i, (w, _, _) in tables.gemvs.items()}
    step = stride(asm) if layer else None
    return P.run([decode(word, asm, shapes, layer, step) for word in asm.words], state, tables)
