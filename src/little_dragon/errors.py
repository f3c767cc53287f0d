"""Errors every layer may raise (a foundation module: imports nothing from the project).

``UserError`` is input the user controls (a missing file, a bad option): ``dragon`` prints it as one line
and exits 2, never with a traceback.  Stage CLIs raise it from here, not from the top-level ``cli`` module,
so no package imports the layer above it.
"""
from __future__ import annotations


class UserError(Exception):
    """An error caused by input the user controls; printed as one line, exit status 2."""
