"""The ops package: every public name imports, and it sits at the bottom of the package."""

import ast
from pathlib import Path

import sparsegcn.ops as ops

OPS_DIR = Path(ops.__file__).parent


def test_public_names_import():
    for name in ops.__all__:
        assert getattr(ops, name) is not None, name
    assert sorted(ops.__all__) == ops.__all__


def imported_names(path: Path) -> list[str]:
    """Every dotted name a module imports (``from a import b`` gives ``a.b``)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return names


def test_ops_imports_nothing_above_it():
    allowed = ("sparsegcn.ops.", "sparsegcn._checks")
    for path in sorted(OPS_DIR.glob("*.py")):
        for name in imported_names(path):
            if name.split(".")[0] == "sparsegcn":
                assert name.startswith(allowed), f"{path.name} imports {name}"
