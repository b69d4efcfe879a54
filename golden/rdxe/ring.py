"""The ring of DXEs, bit for bit: requests' tokens through ``S`` DXEs that hold contiguous layers
(docs/rdxe.md, section 16).

Each DXE holds its layers' tables stacked (:func:`golden.rdxe.assemble.stacked_tables`) and ONE
layer's program, assembled so that it loops over layers (``in_place`` the residual, ``keep`` the
token's RoPE table): for a token it runs the same words once per layer, layer ``l``'s tables and
constants at ``l`` times the stride, with :func:`golden.rdxe.assemble.run_words` (the numerics'
one source). A DXE serves ``slots`` resident requests: the KV cache of the request in slot ``r``
for its layer ``l`` is the DXT's KV groups from :func:`kv_base`, and the DXT side keeps a token
position per slot. Tokens move between DXEs as their TB inputs (the residual, ``cos``, ``sin``).

A request is its prompt tokens' inputs and a count of generated tokens; it passes the ring
``prompt + generate - 1`` times (the last generated token is not fed back). Between a pass's
final hidden state and the next token's input stands the host (the final norm, the LM head, the
sampling, the embedding, the next RoPE table): a function the caller passes. Requests take slots
in order; a request's slot goes to the next waiting request once its last token has passed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.validate import integer

from . import assemble as A

__all__ = ["RingRequest", "split_layers", "kv_base", "Dxe", "dispatch_slots", "run_ring"]


def split_layers(layers: int, stages: int) -> tuple[int, ...]:
    """Return the layers of each DXE: contiguous slices, the first ``layers % stages`` one longer.
    """
    layers = integer(layers, "Layer count", 1, 1024)
    stages = integer(stages, "Ring size", 1, layers)
    q, r = divmod(layers, stages)
    return tuple(q + (1 if s < r else 0) for s in range(stages))


def kv_base(slot: int, layer: int, layers: int, kv_groups: int) -> int:
    """The first of the DXT's KV groups that hold slot ``slot``'s cache of the DXE's layer
    ``layer`` (of ``layers``): ``(slot * layers + layer) * kv_groups``; its query heads start at
    the base times the group size, so the DXT's own GQA reads the right groups."""
    return (slot * layers + layer) * kv_groups


@dataclass(frozen=True)
class RingRequest:
    """A request: its ``prompt`` tokens' inputs (each a dict of the layer program's TB inputs, fp32
    codes) and ``generate`` tokens to produce (at least 1)."""

    prompt: tuple
    generate: int

    def __post_init__(self):
        if not isinstance(self.prompt, tuple) or not self.prompt or \
                not all(isinstance(t, dict) for t in self.prompt):
            raise TypeError(f"Prompt must be a non-empty tuple of input dicts, not "
                            f"{type(self.prompt).__name__}")
        integer(self.generate, "Generation length", 1, 1 << 15)

    @property
    def passes(self) -> int:
        """Passes through the ring: every prompt token, then each generated token but the last."""
        return len(self.prompt) + self.generate - 1


class Dxe:
    """One DXE of the ring: ``asm``'s words over its ``layers`` (a list of
    :class:`~golden.rdxe.program.LayerTables`), its TB and rr-SRAM, and the KV groups of
    ``slots`` resident requests.

    Raises ValueError when ``asm`` cannot loop over layers: an input neither placed in place nor
    kept (:func:`golden.rdxe.assemble.assemble`)."""

    def __init__(self, asm: A.Assembled, layers: list, slots: int):
        for name in asm.inputs:
            if name not in asm.in_place and name not in asm.keep:
                raise ValueError(f"a ring's layer program must assemble every input in place or "
                                 f"kept; input {name!r} is neither")
        self.asm, self.slots = asm, integer(slots, "Resident request count", 1, 4096)
        self.tables = A.stacked_tables(layers, asm)
        self.groups = A.stride(asm).kv_groups
        self.state = A.new_state(asm)
        self.keys: dict[int, list] = {}       # per KV group, a row a position
        self.values: dict[int, list] = {}
        self.positions = [0] * self.slots

    def admit(self, slot: int) -> None:
        """Give ``slot`` to a new request: its position 0 (the DXT reads a group's cache up to
        the slot's position, so what the slot's last request left is never read)."""
        self.positions[slot] = 0

    def token(self, slot: int, inputs: dict) -> dict:
        """Run the token ``inputs`` (name -> codes) of the request in ``slot`` through every
        layer; return the TB inputs of the next DXE (the residual and the kept inputs)."""
        tb, asm = self.state.tb, self.asm
        for name, value in inputs.items():
            tb[(asm.inputs[name], len(value))] = value
        for l, tables in enumerate(self.tables):
            base = kv_base(slot, l, len(self.tables), self.groups)
            group = range(base, base + self.groups)
            self.state.keys = [np.stack([self.keys[g][t] for g in group])
                               for t in range(self.positions[slot])]
            self.state.values = [np.stack([self.values[g][t] for g in group])
                                 for t in range(self.positions[slot])]
            A.run_words(asm, self.state, tables, layer=l)
            for j, g in enumerate(group):
                _put(self.keys.setdefault(g, []), self.positions[slot], self.state.keys[-1][j])
                _put(self.values.setdefault(g, []), self.positions[slot],
                     self.state.values[-1][j])
        self.positions[slot] += 1
        return {name: tb[(asm.inputs[name], len(value))] for name, value in inputs.items()}


def _put(cache: list, position: int, row: np.ndarray) -> None:
    """Write a KV group's ``row`` at ``position`` (a DXT cache row, overwritten when reused)."""
    if position < len(cache):
        cache[position] = row
    else:
        cache.append(row)


def dispatch_slots(passes, slots: int, order) -> list[int]:
    """The slot of each request (``passes``: each request's passes) when its tokens enter in
    ``order`` (request indices): the first ``slots`` requests take slots ``0 ..``, and a request's
    slot goes to the next request (in index order) once its last pass has entered. Raises
    ValueError when ``order`` dispatches a request that is not resident, or does not dispatch
    every pass once."""
    passes = list(passes)
    count = [0] * len(passes)
    slot = {r: r for r in range(min(slots, len(passes)))}
    waiting = list(range(len(slot), len(passes)))
    for p, r in enumerate(order):
        if r not in slot or count[r] >= passes[r]:
            raise ValueError(f"order[{p}] dispatches request {r!r}, which is not resident then; "
                             f"resident: {sorted(q for q in slot if count[q] < passes[q])}")
        count[r] += 1
        if count[r] == passes[r] and waiting:
            slot[waiting.pop(0)] = slot[r]
    if count != passes:
        raise ValueError(f"order dispatches {count} passes of the requests; they have {passes}")
    return [slot[r] for r in range(len(passes))]


def run_ring(asm: A.Assembled, layers: list, stages: int, slots: int, requests, step,
             order=None, engines: list | None = None) -> list[list[dict]]:
    """Run ``requests`` (:class:`RingRequest`) through a ring of ``stages`` DXEs holding
    ``layers`` (one :class:`~golden.rdxe.program.LayerTables` per layer, split by
    :func:`split_layers`), each serving ``slots`` requests; return each request's final hidden
    state of every pass: the in-place outputs after the last layer (name -> fp32 codes).

    ``step(request, position, hidden)`` is the host: the next token's inputs (name -> codes) of
    ``request`` at ``position`` from the final hidden state ``hidden`` of the pass before.
    ``order``: the requests' indices in the order their tokens enter the ring (the cycle model's
    dispatch, :func:`sim.rdxe.ring.schedule`); by default each request's passes in turn. The
    outputs do not depend on the order; the slots do (:func:`dispatch_slots`). ``engines``: a
    list the ring's :class:`Dxe` objects are appended to (their KV caches, for a test).

    Raises TypeError for requests that are not :class:`RingRequest`, ValueError for a ring size
    out of range or an order :func:`dispatch_slots` refuses."""
    requests = list(requests)
    if not requests or not all(isinstance(r, RingRequest) for r in requests):
        raise TypeError("Requests must be a non-empty list of RingRequest")
    split = split_layers(len(layers), stages)
    firsts = np.cumsum((0,) + split)
    dxes = [Dxe(asm, list(layers[a:b]), slots) for a, b in zip(firsts, firsts[1:])]
    if engines is not None:
        engines.extend(dxes)
    if order is None:
        order = [r for r, req in enumerate(requests) for _ in range(req.passes)]
    order = list(order)
    where = dispatch_slots([r.passes for r in requests], slots, order)
    outputs = [[] for _ in requests]
    pending = [None] * len(requests)
    for r in order:
        req, k = requests[r], len(outputs[r])
        if k == 0:
            for dxe in dxes:
                dxe.admit(where[r])
        token = req.prompt[k] if k < len(req.prompt) else pending[r]
        for dxe in dxes:
            token = dxe.token(where[r], token)
        hidden = {name: token[name] for name in asm.in_place}
        outputs[r].append(hidden)
        if len(req.prompt) - 1 <= k < req.passes - 1:
            pending[r] = step(r, k + 1, hidden)
    return outputs
