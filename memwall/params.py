"""Frozen, validated parameter sets of registered blocks, with overrides parsed from text."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
import types
import typing

__all__ = ["ParameterError", "BlockParams"]


class ParameterError(ValueError):
    """A parameter name or value given by a user is not allowed; the message says what is."""


def _parse(name: str, kind, text: str):
    origin = typing.get_origin(kind)
    if origin in (tuple, typing.Tuple):
        (item, *_rest) = typing.get_args(kind) or (str,)
        return tuple(_parse(name, item, part.strip()) for part in text.split(",") if part.strip())
    if origin in (typing.Union, types.UnionType):
        options = [k for k in typing.get_args(kind) if k is not type(None)]
        if text.lower() == "none" and len(options) != len(typing.get_args(kind)):
            return None
        return _parse(name, options[0], text)
    if kind is bool:
        lowered = text.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ParameterError(f"parameter {name} takes true or false, not {text!r}")
    if kind is int:
        try:
            return int(text, 0)
        except ValueError:
            raise ParameterError(f"parameter {name} takes an integer, not {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ParameterError(f"parameter {name} takes a number, not {text!r}") from None
    return text


#: A class a docstring names (``:class:`hdl.rdxe.VacConfig```, ``:class:`~FloatAdder```).
_CLASS_REF = re.compile(r":class:`~?([\w.]+)`")
#: A Sphinx cross-reference (``:class:`~hdl.x.Y```), shown as its target's name.
_ROLE = re.compile(r":\w+:`~?(?:[\w.]+\.)?(\w+)`")
#: A numpydoc ``Parameters`` section, up to the next section or the end.
_PARAMETERS = re.compile(r"^Parameters\n-+\n(.*?)(?=\n\n\S[^\n]*\n-+\n|\Z)", re.S | re.M)


def numpydoc_parameters(obj) -> dict[str, str]:
    """The entries of ``obj``'s numpydoc ``Parameters`` section: name -> description on one line
    (``a, b : int`` gives both names the description)."""
    section = _PARAMETERS.search(inspect.getdoc(obj) or "")
    entries, names = {}, []
    for line in section.group(1).splitlines() if section else []:
        if line and not line[0].isspace():
            names = [n.strip() for n in line.split(" : ")[0].split(",")]
            entries.update({n: "" for n in names if n not in entries})
        elif line.strip():
            for n in names:
                entries[n] = f"{entries[n]} {line.strip()}".strip()
    return {n: _ROLE.sub(r"`\1`", text.replace("``", "`")) for n, text in entries.items()}


def _named_classes(cls) -> list:
    """The classes ``cls``'s docstring names, resolved in its module or by their dotted path."""
    found = []
    for ref in _CLASS_REF.findall(cls.__doc__ or ""):
        target = vars(sys.modules[cls.__module__]).get(ref)
        if target is None and "." in ref:
            module, _, name = ref.rpartition(".")
            try:
                target = getattr(importlib.import_module(module), name, None)
            except ImportError:
                target = None
        if inspect.isclass(target):
            found.append(target)
    return found


@dataclasses.dataclass(frozen=True)
class BlockParams:
    """Base of every block's parameter dataclass.

    Subclasses are frozen dataclasses whose ``__post_init__`` validates every field and raises
    ``TypeError``/``ValueError`` naming the parameter, the allowed values and the value given.
    """

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def descriptions(cls) -> dict[str, str]:
        """Each parameter's meaning, unit and allowed values, as documented where they are
        checked: the numpydoc ``Parameters`` entries of this class and its bases, then of the
        classes their docstrings name (the component or the configuration that validates them).
        A parameter documented nowhere is left out."""
        own = [c for c in cls.__mro__ if c is not object]
        found: dict[str, str] = {}
        for source in own + [ref for c in own for ref in _named_classes(c)]:
            for name, text in numpydoc_parameters(source).items():
                if name in cls.names() and text and name not in found:
                    found[name] = text
        return {name: found[name] for name in cls.names() if name in found}

    def as_dict(self) -> dict:
        """Return the parameters as JSON-friendly values (tuples become lists)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict) -> "BlockParams":
        """Rebuild a parameter set from :meth:`as_dict` output."""
        return cls(**{name: tuple(value) if cls.is_tuple(name) else value
                      for name, value in values.items()})

    @classmethod
    def parse(cls, name: str, text: str):
        """The value of parameter ``name`` written as ``text`` (``--set`` syntax: a tuple's items
        comma-separated), parsed but not yet checked against the block's limits.

        Raises
        ------
        ParameterError
            For an unknown name or a value that is not of the parameter's type.
        """
        return _parse(name, cls._hint(name), text)

    @classmethod
    def is_tuple(cls, name: str) -> bool:
        """Whether parameter ``name`` holds a tuple (its ``--set`` text is comma-separated)."""
        return typing.get_origin(cls._hint(name)) in (tuple, typing.Tuple)

    @classmethod
    def _hint(cls, name: str):
        """The type of parameter ``name``; :class:`ParameterError` naming the others if none."""
        if name not in cls.names():
            raise ParameterError(f"unknown parameter {name!r}; parameters are "
                                 f"{', '.join(cls.names())}")
        return typing.get_type_hints(cls)[name]

    def with_overrides(self, overrides: dict[str, str] | None) -> "BlockParams":
        """Return a copy with ``NAME=VALUE`` text overrides applied and validated.

        Raises
        ------
        ParameterError
            For an unknown name, an unparsable value, or a value the block rejects.
        """
        if not overrides:
            return self
        changes = {name: self.parse(name, text) for name, text in overrides.items()}
        try:
            return dataclasses.replace(self, **changes)
        except (TypeError, ValueError) as exc:
            raise ParameterError(str(exc)) from None
