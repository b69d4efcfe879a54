"""``python -m golden.rdxe``: measure the worst cases and print the cycle table."""

from .survey import _survey

_survey()
