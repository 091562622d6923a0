"""Sphinx configuration for the sparsegcn documentation (built, not hosted).

Pages are MyST Markdown; the API reference is generated from the
docstrings (reStructuredText with Google-style sections) by autodoc and
napoleon. The build runs with ``-W --keep-going``: every warning, a broken
cross-reference included, fails it.
"""

import sparsegcn

project = "sparsegcn"
author = "The sparsegcn authors"
copyright = "The sparsegcn authors, Apache-2.0"
release = sparsegcn.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]

# MyST: `(label)=` targets, $math$, ::: fences; heading anchors for
# [text](page.md#section) links (checked, like every other reference).
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

# autodoc: members in source order, signatures without the long defaults
# repeated in the description, type hints shown in the signature only.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# A package re-exports names from its modules: its page entry lists only the
# functions it defines itself (api/*.md), so each object is documented once.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

napoleon_use_ivar = True  # NamedTuple fields: one description, not two

# Every reference to a sparsegcn name must resolve (nitpicky); names from
# libraries without an inventory here (jax, numpy, optax, the standard
# library's typing) are not checked.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!sparsegcn\b).*")]


def _resolve_reexport(app, env, node, contnode):
    """Resolves ``sparsegcn.Graph`` (a re-export) to where it is documented.

    Docstrings name public objects by their short public path; autodoc
    documents each once, under its defining module.
    """
    import importlib

    if node.get("refdomain") != "py" or not node["reftarget"].startswith("sparsegcn."):
        return None
    module, _, rest = node["reftarget"].rpartition(".")
    parts = [rest]
    while module:
        try:
            obj = importlib.import_module(module)
            break
        except ImportError:
            module, _, name = module.rpartition(".")
            parts.insert(0, name)
    else:
        return None
    for name in parts:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    owner = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not owner or not qualname or f"{owner}.{qualname}" == node["reftarget"]:
        return None
    node["reftarget"] = f"{owner}.{qualname}"
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], node["reftarget"], node, contnode
    )


def setup(app):
    app.connect("missing-reference", _resolve_reexport)


html_theme = "furo"
html_title = f"sparsegcn {release}"
