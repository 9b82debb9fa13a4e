"""The quickstart (docs/quickstart.md) and the README's quick start work as written: followed
line for line in a folder of their own by scripts/quickstart_check.py, on this virtualenv's
packages, the task completes and the admin shows it to the user they make. (The release check,
scripts/release, follows the same page with the built wheel in a fresh virtualenv.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.docs import ROOT

CHECK = ROOT / "scripts" / "quickstart_check.py"


@pytest.mark.parametrize("page", ["docs/quickstart.md", "README.md"])
def test_the_quick_start_works_as_written(tmp_path, page):
    done = subprocess.run(
        [sys.executable, str(CHECK), str(tmp_path / "work"), "--page", str(ROOT / page)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the task completed and the admin shows it" in done.stdout
