"""semel's broker: the server, its handlers, configuration and the command line.

``__version__`` is the one place the version is written at run time; it equals
``[project] version`` in pyproject.toml (tests/tools_cli/test_version.py checks), so
``semel --version`` needs neither importlib.metadata nor the package's metadata files.
"""

__version__ = "0.1.0"
