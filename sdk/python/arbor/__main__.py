"""``python3 -m arbor``: the command-line patterns (see arbor.cli)."""

import sys

from .cli import main

sys.exit(main())
