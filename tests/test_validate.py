"""Tests of the shared parameter checks in hdl/validate.py that no block's tests pin alone."""

import math

import numpy as np
import pytest

from hdl.validate import positive


@pytest.mark.parametrize("value", [1, 0.5, np.int64(3), np.float32(2.5), 1e300])
def test_positive_returns_a_float(value):
    result = positive(value, "Read time tR_us", "microseconds")
    assert isinstance(result, float) and result == float(value)


@pytest.mark.parametrize("value, error, message", [
    (0, ValueError, "Read time tR_us must be a positive number of microseconds, not 0"),
    (-1.5, ValueError, "Read time tR_us must be a positive number of microseconds, not -1.5"),
    (math.nan, ValueError, "Read time tR_us must be a positive number of microseconds, not nan"),
    (math.inf, ValueError, "Read time tR_us must be a positive number of microseconds, not inf"),
    (True, TypeError, "Read time tR_us must be a positive number of microseconds, not True"),
    ("4", TypeError, "Read time tR_us must be a positive number of microseconds, not '4'"),
])
def test_positive_names_the_quantity_its_unit_and_the_value(value, error, message):
    with pytest.raises(error) as info:
        positive(value, "Read time tR_us", "microseconds")
    assert str(info.value) == message


def test_positive_without_a_unit():
    with pytest.raises(ValueError) as info:
        positive(0.0, "Rate npu_gbps")
    assert str(info.value) == "Rate npu_gbps must be a positive number, not 0.0"
