"""Sphinx configuration of the framework docs.

Build:  sphinx-build -W --keep-going -n -E -b html docs docs/_build/html
(-E: a fresh environment; an incremental build re-reports no warning from a page it did not read again.)
Read:   python -m http.server -d docs/_build/html
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).parent
sys.path.insert(0, str(DOCS))

import gen_api  # noqa: E402

gen_api.main()  # docs/api/ from every package's __all__, before Sphinx reads the sources

import framework  # noqa: E402


def _commit() -> str:
    """The commit checked out, with "+ local changes" when the tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=DOCS, text=True,
                              capture_output=True, timeout=10)
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=DOCS, timeout=10).returncode != 0
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" + local changes" if changed else "")


project = "framework"
author = "the framework developers"
release = version = framework.__version__
commit = _commit()
html_title = f"framework {release}"
html_context = {"commit": commit}  # shown under the name on every page (_templates/sidebar/brand.html)
html_show_copyright = False

extensions = ["sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.viewcode", "myst_parser",
              "continued_blocks"]  # docs/continued_blocks.py: "Continues the blocks above" where a block needs them
# No napoleon: the docstrings are reStructuredText prose with Sphinx field lists (":param name:").

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_templates"]
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme = "furo"
nitpicky = True

myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like any reference

# --- API pages (docs/api/, written by gen_api.py) ----------------------------------------------------------
autosummary_generate = False  # gen_api.py writes the pages: one per package, one per class
autodoc_member_order = "bysource"  # hooks in the order they run, as written
autodoc_typehints = "both"  # in the signature, and in the parameter list beside each description
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "mixed"
autodoc_preserve_defaults = True  # show ``precision="32-true"``, not the evaluated object

# --- Types of torch and the standard library ---------------------------------------------------------------
# The build needs no network (CI has none), so no intersphinx inventories: references into these packages
# render as plain text instead of failing the nitpicky build.
nitpick_ignore_regex = [
    ("py:.*", r"(torch|collections|os|contextlib|datetime|enum|abc|argparse|typing|pathlib|types|logging|"
              r"concurrent|threading|multiprocessing|numpy|fsspec|re|io|inspect|tqdm|rich|yaml|weakref|_?pickle|"
              r"signal)\..*"),
    ("py:class", r"framework\.utilities\.rank_zero\.T"),  # a TypeVar
]
# framework classes that public signatures return or take but that have no entry of their own (in no
# package's __all__): each is either to be made public or stays listed here.
nitpick_ignore = [
    ("py:class", "framework.accelerate.data.PreparedDataLoader"),
    ("py:class", "framework.accelerate.prepared.AcceleratedOptimizer"),
    ("py:class", "framework.accelerate.prepared.AcceleratedScheduler"),
    ("py:class", "framework.utilities.model_summary.Summary"),
    ("py:class", "framework.loggers.base.NoOpExperiment"),
    ("py:class", "framework.runtime.compile.StepCompiler"),
    ("py:class", "framework.runtime.wrappers.RuntimeModule"),
    ("py:class", "framework.accelerate.gradient_state.LoaderPass"),
    ("py:class", "LRSchedulerConfig"),  # framework.utilities.types, a Lightning import path, not a package
    ("py:class", "PredictionState"),
    ("py:class", "Optimizer"),  # a string annotation of torch's class, which autodoc cannot qualify
    ("py:class", "timedelta"),  # the same, of datetime's
    ("py:class", "_OurMixedPrecision"),  # framework.plugins.precision's name for framework.precision.MixedPrecision
    ("py:exc", "NotProvidedError"),  # framework.errors: what a Lightning name framework does not provide raises
]


def _drop_private_bases(app, name, obj, options, bases: list) -> None:
    """show-inheritance names only documented bases: framework's private mixins have no entry to link to (their
    members are listed on the class itself, see gen_api._members)."""
    public = gen_api.public_ids()
    bases[:] = [b for b in bases if not getattr(b, "__module__", "").startswith("framework") or id(b) in public]
    if not bases:
        bases.append(object)


def _enter_aliases(app, env) -> None:
    """Enter ``framework.trainer.Trainer`` (and each other alias) in the inventory, pointing at the entry of the
    path it is documented under, so that references and intersphinx users find every exported name."""
    from sphinx.util import logging

    objects = env.get_domain("py").objects
    for alias, home in gen_api.aliases().items():
        entry = objects.get(home)
        if entry is None:
            logging.getLogger(__name__).warning("%s is exported, but %s has no entry to point it at", alias, home)
            continue
        objects[alias] = entry._replace(aliased=True)


def setup(app):
    app.connect("autodoc-process-bases", _drop_private_bases)
    app.connect("env-updated", _enter_aliases)
