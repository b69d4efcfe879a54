"""``python -m golden.inflash``: measure the worst cases and print the timing tables."""

from .survey import _survey, _timing_tables

_survey()
print()
_timing_tables()
