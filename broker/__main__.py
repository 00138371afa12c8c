"""``python -m broker serve ...`` — the same as ``semel serve``."""

import sys

from broker.cli import main

sys.exit(main())
