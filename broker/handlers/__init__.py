"""One module per Kafka API, named after it (``end_txn.py``).

Each module defines ``API_KEY``, ``async def handle(ctx, request) -> response | None`` and
``def error_response(request, code) -> response`` (the answer when a ``KafkaError`` escapes
``handle``). ``HANDLERS`` maps api key -> module for every module found here.

A module is imported (and with it the generated codecs it uses) when its API is first
looked up, not at start: the table is built from the file names alone, the module of API
``EndTxn`` being ``end_txn`` (``protocol.api`` names the APIs). A module whose name names no
API is imported at once and listed under its ``API_KEY``, if it has one.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator, Mapping
from types import ModuleType

from semel.protocol import api


class HandlerTable(Mapping[int, ModuleType]):
    """api key -> handler module, imported on first lookup. ``loaded`` is the plain dict of
    the modules imported so far (dispatch reads it first)."""

    def __init__(self, names: dict[int, str], loaded: dict[int, ModuleType]) -> None:
        self._names = names  # api key -> module name, imported or not
        self.loaded = loaded

    def __getitem__(self, key: int) -> ModuleType:
        module = self.loaded.get(key)
        if module is not None:
            return module
        module = importlib.import_module(f"{__name__}.{self._names[key]}")
        if getattr(module, "API_KEY", None) != key:
            raise ImportError(f"{module.__name__}: API_KEY is not {key} "
                              f"({api.BY_KEY[key].name})")
        self.loaded[key] = module
        return module

    def __contains__(self, key: object) -> bool:
        return key in self._names

    def __iter__(self) -> Iterator[int]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def load_all(self) -> dict[int, ModuleType]:
        """Import every handler module now; the table as a plain dict."""
        return {key: self[key] for key in self._names}


def _discover() -> HandlerTable:
    by_module = {re.sub(r"(?<!^)(?=[A-Z])", "_", a.name).lower(): a.key for a in api.APIS}
    names: dict[int, str] = {}
    loaded: dict[int, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        key = by_module.get(info.name)
        if key is not None:
            names[key] = info.name
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        key = getattr(module, "API_KEY", None)
        if key is not None:
            names[key] = info.name
            loaded[key] = module
    return HandlerTable(names, loaded)


HANDLERS: HandlerTable = _discover()
