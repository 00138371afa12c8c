"""One module per Kafka API, named after it (``end_txn.py``).

Each module defines ``API_KEY``, ``async def handle(ctx, request) -> response | None`` and
``def error_response(request, code) -> response`` (the answer when a ``KafkaError`` escapes
``handle``). ``HANDLERS`` maps api key -> module for every module found here.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def _discover() -> dict[int, ModuleType]:
    handlers: dict[int, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        key = getattr(module, "API_KEY", None)
        if key is not None:
            handlers[key] = module
    return handlers


HANDLERS: dict[int, ModuleType] = _discover()
