"""connectd: the daemon and CLI that wire connectcore's rules to tmux, SQLite, HTTP and MCP."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("connect")  # the installed distribution's version (pyproject.toml)
except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
    __version__ = "0+unknown"
