"""The ranking of Lightning names in docs/coming-from-lightning.md is true: under the switch every row marked
"yes" imports as one of framework's objects, and every row marked "no" imports as a name that fails when used."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.as_lightning.test_switch import FRAMEWORK, REPOSITORY, run

ROW = re.compile(r"^\| (\d+) \| `([^`]+)` \| `([^`]+)` \| [^|]+ \| (yes|no: [^|]+) \|$")

CHECK = """
import importlib, json, sys
from framework.as_lightning.not_provided import NotProvided
found = {}
for rank, module, name in json.loads(sys.argv[1]):
    value = getattr(importlib.import_module(module), name.split(".")[0])
    if name.endswith(".rank"):
        value = value.rank
    found[rank] = not isinstance(value, NotProvided)
print(json.dumps(found))
"""


def ranked_rows() -> list[tuple[str, str, str, bool]]:
    page = (REPOSITORY / "docs" / "coming-from-lightning.md").read_text()
    rows = [ROW.match(line) for line in page.splitlines()]
    return [(match[1], match[3], match[2], match[4] == "yes") for match in rows if match]


def test_every_ranked_name_is_provided_exactly_as_the_page_says(tmp_path: Path):
    rows = ranked_rows()
    assert len(rows) == 150 and [int(rank) for rank, *_ in rows] == list(range(1, 151))
    request = json.dumps([(rank, module, name) for rank, module, name, _ in rows])
    done = run(FRAMEWORK + ["as-lightning", sys.executable, "-c", CHECK, request], tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = [(rank, module, name, "page says provided" if provided else "page says not provided")
             for rank, module, name, provided in rows if found[rank] != provided]
    assert not wrong, wrong
