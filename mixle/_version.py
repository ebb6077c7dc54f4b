"""The package version (its own module so any layer can import it)."""

from __future__ import annotations

__version__ = "0.1.0"
