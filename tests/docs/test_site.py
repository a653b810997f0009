"""The docs build without a warning, document every public name with text of its own, and every internal link in
them resolves."""

from __future__ import annotations

import html.parser
import importlib
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

from sphinx.util.inventory import InventoryFile

import framework
from tests.docs.api_entries import entries, without_bases
from tests.docs.blocks import blocks_of
from tests.docs.site_build import ARTIFACTS, DOCS, ROOT

sys.path.insert(0, str(DOCS))
import gen_api  # noqa: E402
from continued_blocks import names_from_above  # noqa: E402


def test_the_site_builds_with_warnings_as_errors_and_nitpicky_references(site):
    assert site.returncode == 0, f"sphinx-build failed ({site.seconds:.0f} s):\n{site.output[-20000:]}"
    assert "WARNING" not in site.output and "ERROR" not in site.output, site.output[-20000:]
    for page in ("index.html", "api/framework.html", "getting-started.html", "search.html", "objects.inv"):
        assert (site.html / page).is_file(), f"the build made no {page}"


def test_every_public_name_has_an_entry_in_the_inventory(site):
    with open(site.html / "objects.inv", "rb") as file:
        inventory = InventoryFile.load(file, "", lambda base, uri: uri)
    data = inventory.data if hasattr(inventory, "data") else inventory  # Sphinx 8.2+ wraps the dict
    entries = {name for role, items in data.items() if role.startswith("py:") for name in items}
    wanted = [f"{pkg}.{name}" for pkg in gen_api.public_packages()
              for name in importlib.import_module(pkg).__all__]
    assert len(wanted) > 250
    missing = sorted(set(wanted) - entries)
    assert not missing, f"public names without an API entry: {missing}"


class _Links(html.parser.HTMLParser):
    """The ids a page defines and the links (``a href``, ``img src``) it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"])
        if tag == "a" and found.get("name"):
            self.ids.add(found["name"])
        target = found.get("href") if tag == "a" else found.get("src") if tag == "img" else None
        if target:
            self.links.append(target)


def _parse(page: Path) -> _Links:
    parsed = _Links()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed


def test_every_internal_link_and_anchor_resolves_and_external_links_are_listed(site):
    pages = {page: _parse(page) for page in site.html.rglob("*.html") if "_static" not in page.parts}
    broken, external = [], set()
    for page, parsed in pages.items():
        for link in parsed.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc:
                if url.scheme not in ("http", "https", "mailto"):
                    broken.append(f"{page.relative_to(site.html)}: {link} (scheme {url.scheme!r})")
                external.add(link)
                continue
            target = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site.html)}: {link} (no such file)")
            elif url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if urllib.parse.unquote(url.fragment) not in ids:
                    broken.append(f"{page.relative_to(site.html)}: {link} (no anchor #{url.fragment})")
    (ARTIFACTS / "external-links.txt").write_text("\n".join(sorted(external)) + "\n")
    assert len(pages) > 40, sorted(pages)
    assert not broken, "broken links in the built site:\n" + "\n".join(broken)


def test_the_readme_links_only_to_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        url = urllib.parse.urlsplit(target)
        if not (url.scheme or url.netloc or target.startswith("#")) and not (ROOT / url.path).exists():
            broken.append(target)
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_every_page_shows_the_version_and_commit_it_was_built_from(site):
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    stamp = f"built from commit <code>{commit}"
    pages = [page for page in site.html.rglob("*.html") if "_static" not in page.parts]
    unstamped = [str(page.relative_to(site.html)) for page in pages
                 if f"framework {framework.__version__}</span>" not in (text := page.read_text())
                 or (commit and stamp not in text)]
    assert not unstamped, f"pages without 'framework {framework.__version__}' and '{stamp}': {unstamped}"


def _table_rows(text: str) -> set[str]:
    rows = {" ".join(cell.strip() for cell in line.strip().strip("|").split("|"))
            for line in text.splitlines() if line.lstrip().startswith("|")}
    return {row for row in rows if set(row) - set("-: ")}  # not the |---|:--| rules


def test_the_benchmarks_page_shows_exactly_the_rows_benchmarks_readme_measured():
    # two copies of the figures: the page's for reading, benchmarks/README.md's beside the scripts
    page = _table_rows((DOCS / "benchmarks.md").read_text())
    measured = _table_rows((ROOT / "benchmarks" / "README.md").read_text())
    assert len(measured) > 50
    assert page == measured, (f"only on docs/benchmarks.md: {sorted(page - measured)}\n"
                              f"only in benchmarks/README.md: {sorted(measured - page)}")


def test_every_entry_of_the_reference_has_text_of_its_own(site):
    # what a reader sees: each entry's description (a class's members are entries of their own), not its signature
    found = entries(site.html)
    assert len(found) > 1000
    for hook in ("framework.Callback.on_train_batch_end", "framework.Module.training_step",
                 "framework.DataModule.setup", "framework.trainer.TrainerState"):
        assert hook in found, hook
    empty = sorted(name for name, text in found.items() if not without_bases(text))
    assert not empty, (f"{len(empty)} entries of the API reference show no text; give each a docstring (a `#:` "
                       f"comment above an attribute, a `:param NAME:` field for a dataclass field): {empty}")


def test_a_block_that_needs_earlier_blocks_says_so_above_it_and_names_what_it_uses(site):
    # docs/continued_blocks.py writes the line; here every Markdown page's shown blocks are counted from the source
    pages = [page for page in sorted(DOCS.rglob("*.md")) if "_build" not in page.parts]
    said = re.compile(r'<p class="continues-above">Continues the blocks above: uses (.*?)</p>', re.S)
    checked = 0
    for page in pages:
        shown = [block.code for block in blocks_of(page) if block.how != "setup"]
        expected = [names for names in names_from_above(shown) if names]
        built = (site.html / page.relative_to(DOCS).with_suffix(".html")).read_text()
        lines = [re.findall(r'<span class="pre">([^<]+)</span>', line) for line in said.findall(built)]
        assert lines == expected, f"{page.relative_to(ROOT)}: the lines above its blocks name {lines}, not {expected}"
        checked += len(expected)
    assert checked > 30, checked  # the guides' examples build on a first block: many blocks continue one
