"""Every public name imports: ``__all__`` of the package and of each subpackage."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import sparsegcn


def public_modules() -> list[str]:
    """Every sparsegcn module that declares ``__all__``."""
    names = ["sparsegcn"]
    for info in pkgutil.walk_packages(sparsegcn.__path__, "sparsegcn."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if hasattr(module, "__all__"):
            names.append(info.name)
    return names


@pytest.mark.parametrize("module_name", public_modules())
def test_every_name_in_all_imports(module_name):
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{module_name}.__all__ repeats a name"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names what it does not define: {missing}"
    for name in exported:
        namespace = {}
        exec(f"from {module_name} import {name}", namespace)
        assert namespace[name] is getattr(module, name)


def test_the_engine_is_public_at_the_top_level():
    for name in (
        "message_passing",
        "edge_softmax",
        "edge_scores",
        "as_layout",
        "LAYOUTS",
        "MODELS",
        "create_model",
        "gat",
        "gatv2",
        "run_layers",
        "segment_softmax",
        "Bipartite",
    ):
        assert name in sparsegcn.__all__, name
