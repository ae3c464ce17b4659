"""The `threadlog` command: a thin shell over the library.

Each command opens the store, calls one library function and formats the result. Domain
errors print `error: …` on stderr and exit 1; usage errors exit 2 (click's convention); a
write committed whose result could not be printed (stdout full, closed, or in an encoding
that cannot write it) exits 3.

The group and its error policy are in `group`, the shared options in `options`, opening the
store in `opening`; each family of commands is a module of its own, imported when one of
its commands is used (`group._COMMANDS`), so that a command loads only what it needs.
"""

from __future__ import annotations

from .group import cli, main

__all__ = ["cli", "main"]
