"""broker.handlers.HANDLERS imports a handler module on its API's first request: every
module is found under its API's key, loads, and names that key; the advertised API table
needs none of them imported."""

from __future__ import annotations

import subprocess
import sys

from semel.broker.handlers import HANDLERS
from semel.protocol import api


def test_every_handler_module_loads_under_its_api_key():
    modules = HANDLERS.load_all()
    assert len(modules) == len(HANDLERS) >= 40
    for key, module in modules.items():
        assert module.API_KEY == key, module.__name__
        assert module.__name__.endswith("." + api.snake(api.BY_KEY[key].name))
        assert callable(module.handle) and callable(module.error_response)


def test_start_up_imports_no_handler_codecs():
    code = ("import sys; from semel.broker.dispatch import advertised_versions; "
            "table = advertised_versions(); "
            "print(len(table), sum(m.startswith('semel.protocol.messages.') "
            "for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    advertised, codecs = map(int, done.stdout.split())
    assert advertised == len(HANDLERS)
    assert codecs == 0
