"""Log lines written by the host, tagged with the component's name."""

from ._bindings import logging as _wit

_LEVELS = ("trace", "debug", "info", "warn", "error")


def log(level: str, message: str) -> None:
    """Writes ``message`` through the host at ``level`` (trace, debug, info,
    warn or error)."""
    if _wit is None:
        print(f"[{level}] {message}")
        return
    name = level.upper() if level in _LEVELS else "INFO"
    _wit.log(getattr(_wit.Level, name), str(message))
