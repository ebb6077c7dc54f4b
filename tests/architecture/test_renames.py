"""Every rename of mixle goes through mixle._io (durable or, commented, atomic only)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mixle"


def test_no_raw_os_rename_outside_io() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_io.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("replace", "rename", "renames")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} os.{node.attr}")
    assert not found, "use mixle._io.rename_durably / rename_atomically: " + ", ".join(found)
