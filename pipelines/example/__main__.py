"""``python -m pipelines.example``: see ``pipelines.example.cli``."""

from pipelines.example.cli import main

raise SystemExit(main())
