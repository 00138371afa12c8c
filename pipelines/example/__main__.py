"""``python -m semel.pipelines.example``: see ``pipelines.example.cli``."""

from semel.pipelines.example.cli import main

raise SystemExit(main())
