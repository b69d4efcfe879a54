"""Walk a component's signature: its streams and its plain ports, by path and direction.

One walker for everyone who takes a block as it comes: the stream-contract proofs
(:mod:`synth.contract`) and the board harness (:mod:`hdl.board.harness`).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.lib import stream, wiring

__all__ = ["KINDS", "Port", "ports_of"]

#: Kinds of :class:`Port`: a stream the component takes (``sink``) or gives (``source``), a plain
#: input or output port.
KINDS = ("sink", "source", "input", "output")


@dataclass(frozen=True)
class Port:
    """One member of a component's signature, as a harness sees it.

    ``name`` is the member's path joined with ``.`` (array indices as numbers); ``kind`` one of
    :data:`KINDS`; ``value`` the stream interface or the port's value.
    """

    name: str
    kind: str
    value: object


def ports_of(component: wiring.Component) -> list[Port]:
    """Every stream and every plain port of ``component``'s signature, nested signatures walked."""
    found: list[Port] = []

    def elements(value, dimensions, path):
        if not dimensions:
            yield path, value
            return
        for index in range(dimensions[0]):
            yield from elements(value[index], dimensions[1:], (*path, str(index)))

    def visit(members, obj, prefix):
        for name, member in members.items():
            for path, value in elements(getattr(obj, name), member.dimensions, (*prefix, name)):
                dotted = ".".join(path)
                if member.is_port:
                    found.append(Port(dotted, "input" if member.flow == wiring.In else "output",
                                      value))
                elif isinstance(member.signature, stream.Signature):
                    found.append(Port(dotted, "sink" if member.flow == wiring.In else "source",
                                      value))
                else:
                    visit(member.signature.members, value, path)

    visit(component.signature.members, component, ())
    return found
