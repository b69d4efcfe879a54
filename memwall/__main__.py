"""`python -m memwall`: the same command line as the `memwall` script."""

import sys

from .cli import main

sys.exit(main())
