"""The docs site for the tests of tests/docs, built once per run (see site_build.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.site_build import Site, SiteBuild, private_folder, shared_folder, wait_for

_builds: list[SiteBuild] = []


def pytest_collection_finish(session) -> None:
    """In a plain run, start the build as soon as the session knows it runs a test that needs the site (after
    ``-k`` and the like have deselected theirs). A ``pytest -n N`` worker does not: its controller builds."""
    here = Path(__file__).parent
    wanted = any(here in Path(item.path).parents and "site" in getattr(item, "fixturenames", ())
                 for item in session.items)
    if wanted and not session.config.option.collectonly and not hasattr(session.config, "workerinput"):
        _start(session.config)


def _start(config) -> SiteBuild:
    if not _builds:
        _builds.append(SiteBuild(private_folder(), niced=True))
        config.add_cleanup(lambda: _builds.pop().stop())
    return _builds[0]


@pytest.fixture(scope="session")
def site(pytestconfig) -> Site:
    if hasattr(pytestconfig, "workerinput"):
        return wait_for(shared_folder(pytestconfig.workerinput["testrunuid"]))
    return wait_for(_start(pytestconfig).folder)  # started at collection, unless this session was collected otherwise
