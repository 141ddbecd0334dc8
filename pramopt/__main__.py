"""``python -m pramopt``: the command line (see :mod:`pramopt.cli`)."""

import sys

from .cli import main

sys.exit(main())
