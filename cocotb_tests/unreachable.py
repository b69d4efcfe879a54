"""Arms of the generated Verilog's selects that no input can reach, for ``make coverage``.

Yosys writes each parallel multiplexer (``$pmux``) as a function of ``(a, b, s)`` whose
``casez (s)`` has one arm per select bit and a ``default`` that returns ``a``. Two kinds of its
arms cannot be taken, whatever the inputs:

* the select is a constant (a block parameter fixed it, for example a VAC's index in its
  result ports): only the arm that constant matches is taken;
* the select bits are ``E == 0``, ``E == 1``, ... for every value of one expression ``E`` (a
  ``Switch`` or an index over every value; ``E``'s declared width that of the constants, or
  ``E`` and ``~E`` of one bit): exactly one bit is set in every cycle, so the ``default`` is
  never taken.

:func:`unreachable_arms` finds both by reading the Verilog text (the functions, the calls and the
one-line ``assign`` of each select bit), so that Verilator's line points on those arms are
excluded from the line figure with their reason, rather than counted as holes no test can close.
"""

from __future__ import annotations

import re

__all__ = ["unreachable_arms", "CONSTANT", "COMPLETE"]

#: The reasons an arm is unreachable.
CONSTANT = "a select fixed at a constant: only the arm it matches is taken"
COMPLETE = "the default after one arm per value of one expression: one select bit is always set"

_FUNCTION = re.compile(r"^\s*function (?:\[\d+:0\] )?(\w+);")
_ARM = re.compile(r"^\s*(\d+)'b([01?]+):")
_DEFAULT = re.compile(r"^\s*default:")
_ASSIGN = re.compile(r"^\s*assign (\S+) = (.*);\s*$")
_ATTRIBUTE = re.compile(r"\(\*.*?\*\)")
_CONSTANT = re.compile(r"^(\d+)'([hbd])([0-9a-fA-F_]+)$")
_DECLARATION = re.compile(
    r"^\s*(?:wire|reg|input|output)\s+(?:\[(\d+):(\d+)\]\s+)?(\w+)\s*(?:=[^;]*)?;")
_PART = re.compile(r"^(\w+)(?:\[(\d+)(?::(\d+))?\])?$")


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a call (braces and parentheses nest)."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    return [*args, text[start:].strip()]


def _constant(text: str) -> tuple[int, int] | None:
    """``(width, value)`` of a sized Verilog constant without x or z, else None."""
    match = _CONSTANT.match(text.replace(" ", ""))
    if not match:
        return None
    width, base, digits = match.groups()
    return int(width), int(digits.replace("_", ""), {"h": 16, "b": 2, "d": 10}[base])


def _compare(rhs: str) -> tuple[str, int, int | None, str] | None:
    """A select bit's expression as ``(E, value, width, kind)``: it is set when ``E == value``.
    ``kind`` is ``"eq"`` for ``E == K`` and ``! E`` (``width`` that of ``K``, None for ``!``)
    and ``"bit"`` for ``E`` and ``~ E``, which test bit 0 of ``E`` (``width`` 1)."""
    rhs = _ATTRIBUTE.sub("", rhs).strip()
    if "==" in rhs:
        left, _, right = rhs.rpartition("==")
        const = _constant(right.strip())
        return (left.strip(), const[1], const[0], "eq") if const else None
    if rhs.startswith("!"):
        return rhs[1:].strip(), 0, None, "eq"
    if rhs.startswith("~"):
        return rhs[1:].strip(), 0, 1, "bit"
    if re.fullmatch(r"[\w.\[\]:]+", rhs):
        return rhs, 1, 1, "bit"
    return None


def _width(expr: str, widths_of: dict[str, int]) -> int | None:
    """The width of a name, a bit or part of one, or a concatenation of those; None when the
    declarations do not show it."""
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        parts = [_width(p, widths_of) for p in _split_args(expr[1:-1])]
        return None if None in parts else sum(parts)
    match = _PART.match(expr.replace(" ", ""))
    if not match:
        return None
    name, high, low = match.groups()
    if high is None:
        return widths_of.get(name)
    return 1 if low is None else int(high) - int(low) + 1


def _select_values(select: str, assigns: dict[str, str], bits: int,
                   widths_of: dict[str, int]) -> tuple[set, str] | None:
    """The values the ``bits``-bit select can take, and the reason they are limited; None when
    the text does not show it (``widths_of``: the module's declared widths by name)."""
    const = _constant(select)
    if const:
        return {const[1]}, CONSTANT
    if select.startswith("{"):
        names = _split_args(select.strip("{} "))
    elif select in assigns and assigns[select].startswith("{"):
        names = _split_args(assigns[select].strip("{} "))
    else:
        return None
    if len(names) != bits:
        return None
    compares = [_compare(assigns[n]) if n in assigns else None for n in names]
    if None in compares or len({(c[0], c[3]) for c in compares}) != 1:
        return None
    widths = {c[2] for c in compares if c[2] is not None}
    if len(widths) != 1:
        return None
    width = widths.pop()
    if compares[0][3] == "eq" and _width(compares[0][0], widths_of) != width:
        return None                 # E == K tests every value of E only when E is K's width
    if sorted(c[1] for c in compares) != list(range(2 ** width)):
        return None
    return {1 << (bits - 1 - i) for i in range(bits)}, COMPLETE


def _functions(lines: list[str]) -> dict[str, dict]:
    """Yosys's ``$pmux`` functions: ``{name: {"bits": select width, "arms": [(line, pattern or
    None for the default)]}}``."""
    found, current = {}, None
    for number, line in enumerate(lines, 1):
        start = _FUNCTION.match(line)
        if start:
            current = {"bits": None, "arms": []}
            found[start.group(1)] = current
        elif current is not None:
            if line.strip() == "endfunction":
                current = None
            elif arm := _ARM.match(line):
                current["bits"] = int(arm.group(1))
                current["arms"].append((number, arm.group(2)))
            elif _DEFAULT.match(line):
                current["arms"].append((number, None))
    return {name: f for name, f in found.items() if f["bits"] and f["arms"]}


def _matches(pattern: str, value: int) -> bool:
    bits = len(pattern)
    return all(c == "?" or int(c) == (value >> (bits - 1 - i)) & 1 for i, c in enumerate(pattern))


def unreachable_arms(text: str) -> dict[int, str]:
    """``{line: reason}`` for every arm of a ``$pmux`` function that no call can take (names
    are a module's own: each module is read apart)."""
    lines, out, start = text.splitlines(), {}, 0
    for number, line in enumerate(lines):
        if line.startswith("endmodule"):
            found = _module_arms(lines[start:number + 1])
            out.update({start + k: why for k, why in found.items()})
            start = number + 1
    if start < len(lines):                          # text after the last module, or none
        found = _module_arms(lines[start:])
        out.update({start + k: why for k, why in found.items()})
    return out


def _module_arms(lines: list[str]) -> dict[int, str]:
    """:func:`unreachable_arms` of one module's lines (line numbers counted from 1)."""
    assigns, widths_of = {}, {}
    calls: dict[str, list[str]] = {}
    for line in lines:
        declared = _DECLARATION.match(line)
        if declared:
            high, low, name = declared.groups()
            widths_of[name] = 1 if high is None else int(high) - int(low) + 1
        match = _ASSIGN.match(line)
        if not match:
            continue
        target, rhs = match.groups()
        assigns[target] = rhs
        call = re.fullmatch(r"(\w+)\((.*)\)", rhs.strip())
        if call:
            calls.setdefault(call.group(1), []).append(call.group(2))
    out: dict[int, str] = {}
    for name, function in _functions(lines).items():
        reachable, reasons = set(), set()
        for args in calls.get(name, [None]):
            parts = _split_args(args) if args is not None else []
            limited = (_select_values(parts[2], assigns, function["bits"], widths_of)
                       if len(parts) == 3 else None)
            if limited is None:
                break
            reachable |= limited[0]
            reasons.add(limited[1])
        else:
            taken = {_first_arm(function["arms"], v) for v in reachable}
            for number, _ in function["arms"]:
                if number not in taken:
                    out[number] = "; ".join(sorted(reasons))
    return out


def _first_arm(arms: list[tuple[int, str | None]], value: int) -> int | None:
    """The line of the arm a select ``value`` takes (casez takes the first that matches)."""
    return next((number for number, pattern in arms
                 if pattern is None or _matches(pattern, value)), None)
