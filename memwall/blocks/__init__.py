"""Registry entries of every block; importing this package registers them all."""

from . import umdam  # noqa: F401
