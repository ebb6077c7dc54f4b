"""Allow ``python -m mixle.cli`` (and so ``torchrun -m mixle.cli``)."""

from __future__ import annotations

from mixle.cli import main

if __name__ == "__main__":  # spawned ingest workers import this module; never re-run it
    raise SystemExit(main())
