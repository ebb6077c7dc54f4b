"""Allow ``python -m mixle.cli`` (and so ``torchrun -m mixle.cli``)."""

from __future__ import annotations

from mixle.cli import main

raise SystemExit(main())
