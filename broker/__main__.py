"""``python -m semel.broker serve ...`` — the same as ``semel serve``."""

import sys

from semel.broker.cli import main

sys.exit(main())
