"""Frozen, validated parameter sets of registered blocks, with overrides parsed from text."""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class BlockParams:
    """Base of every block's parameter dataclass.

    Subclasses are frozen dataclasses whose ``__post_init__`` validates every field and raises
    ``TypeError``/``ValueError`` naming the parameter, the allowed values and the value given.
    """

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_dict(self) -> dict:
        """Return the parameters as JSON-friendly values (tuples become lists)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict) -> "BlockParams":
        """Rebuild a parameter set from :meth:`as_dict` output."""
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for name, value in values.items():
            if name not in cls.names():
                raise ParameterError(f"unknown parameter {name!r}; parameters are "
                                     f"{', '.join(cls.names())}")
            kwargs[name] = tuple(value) if typing.get_origin(hints[name]) is tuple else value
        return cls(**kwargs)

    def with_overrides(self, overrides: dict[str, str] | None) -> "BlockParams":
        """Return a copy with ``NAME=VALUE`` text overrides applied and validated.

        Raises
        ------
        ParameterError
            For an unknown name, an unparsable value, or a value the block rejects.
        """
        if not overrides:
            return self
        hints = typing.get_type_hints(type(self))
        changes = {}
        for name, text in overrides.items():
            if name not in self.names():
                raise ParameterError(f"unknown parameter {name!r}; parameters are "
                                     f"{', '.join(self.names())}")
            changes[name] = _parse(name, hints[name], text)
        try:
            return dataclasses.replace(self, **changes)
        except (TypeError, ValueError) as exc:
            raise ParameterError(str(exc)) from None
