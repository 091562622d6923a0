"""The ops package: every public name imports, and it sits at the bottom of the package."""

import ast
from pathlib import Path

import sparsegcn.ops as ops

OPS_DIR = Path(ops.__file__).parent


def test_public_names_import():
    for name in ops.__all__:
        assert getattr(ops, name) is not None, name
    assert sorted(ops.__all__) == ops.__all__


def test_ops_imports_nothing_above_it():
    allowed = {"sparsegcn._checks"}
    for path in sorted(OPS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("sparsegcn") and not name.startswith("sparsegcn.ops"):
                    assert name in allowed, f"{path.name} imports {name}"
