"""Sphinx configuration of tvm-hetero's documentation site (``make docs``).

``make test`` builds it with warnings as errors and the tutorials rendered as they are stored;
``make docs`` executes the tutorials first (``TVM_HETERO_DOCS_EXECUTE=force``), so the pages show
their outputs and plots.
"""

from __future__ import annotations

import os

project = "tvm-hetero"
author = "tvm-hetero developers"
copyright = "2026, tvm-hetero developers"
release = version = "0.1.0"

extensions = [
    "myst_nb",  # Markdown (MyST) pages and the Jupyter tutorials
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # numpy docstrings
    "sphinxarg.ext",  # the command reference, from the argument parser
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "tutorials/.ipynb_checkpoints", "tutorials/*.png"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]  # the design's links into the source tree

nb_execution_mode = os.environ.get("TVM_HETERO_DOCS_EXECUTE", "off")
nb_execution_timeout = 900
nb_execution_raise_on_error = True

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True  # a dataclass field once, not as an attribute and a member

html_theme = "furo"
html_title = "tvm-hetero"
