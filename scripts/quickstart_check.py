"""Follow docs/quickstart.md as written, in a folder of its own, and check what it promises: the
task completed, and the admin's task list shows it to the user the quickstart made.

    python scripts/quickstart_check.py WORKDIR                   # with this interpreter's packages
    python scripts/quickstart_check.py WORKDIR --wheel dist/X.whl --python python3.13

The page's ```sh blocks (`--page README.md`: those of its section "Quick start") run in order
as one bash script, from WORKDIR/checkout (so the page's `../quickstart` is
WORKDIR/quickstart), line for line, except:

- the virtualenv and `pip install .`: with `--wheel`, `python3 -m venv` runs with `--python`
  and `pip install .` installs WHEEL instead, so the built wheel is installed into a fresh
  virtualenv, without the checkout; without `--wheel` they are left out, and the project runs
  on this interpreter's packages (the test suite's virtualenv);
- `runserver` is left out (it serves until Ctrl-C): the admin's task list and the task's page
  are fetched through Django's test client instead, logged in as the page's user;
- a block marked `<!-- quickstart: forever -->` (a worker and a monitor until Ctrl-C).

Exits 0 when every step ran and the checks passed; otherwise prints the script's output.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"
BLOCK = re.compile(r"(?:<!-- quickstart: (\w+) -->\n)?```sh\n(.*?)```", re.DOTALL)

# Run in the project once the page's steps are done: the task's status and result, and the
# admin's task list as the page's user sees it.
CHECK = """\
from django.test import Client
from scylla_django.models import Task

task = Task.objects.get(rn="hello-ada")
assert task.status == "completed", task.status
assert task.result == {"greeting": "Hello, Ada!"}, task.result
client = Client(HTTP_HOST="127.0.0.1")
assert client.login(username="admin", password="admin")
page = client.get("/admin/scylla_django/task/")
assert page.status_code == 200, page.status_code
assert b"hello-ada" in page.content
page = client.get(f"/admin/scylla_django/task/{task.pk}/change/")
assert page.status_code == 200 and b"Hello, Ada!" in page.content, page.status_code
print("quickstart: the task completed and the admin shows it")
"""


def blocks(text: str) -> list[tuple[str, str]]:
    """(mark, body) of each ```sh block of the page, in order."""
    return [(mark or "", body) for mark, body in BLOCK.findall(text)]


def quick_start(page: Path) -> str:
    """The part of `page` to follow: all of docs/quickstart.md, the README's "Quick start"."""
    text = page.read_text()
    if page.name == "README.md":
        start = text.index("\n## Quick start\n")
        return text[start : text.index("\n## ", start + 1)]
    return text


def script(text: str, wheel: Path | None, python: str) -> str:
    """The bash script the page's blocks make (see the module's docstring)."""
    lines = ["set -euo pipefail"]
    seen = {"venv": False, "install": False, "serve": False}
    for mark, body in blocks(text):
        if mark == "forever":
            continue
        for line in body.splitlines():
            if line.startswith("python3 -m venv "):
                seen["venv"] = True
                if wheel is None:
                    continue
                line = line.replace("python3", shlex.quote(python), 1)
            elif line == ". .venv/bin/activate" and wheel is None:
                continue
            elif line == "pip install .":
                seen["install"] = True
                if wheel is None:
                    continue
                line = f"pip install {shlex.quote(str(wheel))}"
            elif "manage.py runserver" in line:
                seen["serve"] = True
                continue
            lines.append(line)
    missing = [step for step, found in seen.items() if not found]
    if missing:
        raise SystemExit(f"the quick start lost its steps: {missing}")
    lines.append(f"python manage.py shell -c {shlex.quote(CHECK)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path, help="An empty folder to follow the page in.")
    parser.add_argument("--wheel", type=Path, help="Install this wheel into a fresh virtualenv.")
    parser.add_argument("--python", default="python3", help="The interpreter of that virtualenv.")
    parser.add_argument(
        "--page", type=Path, default=PAGE, help="docs/quickstart.md (default) or README.md."
    )
    options = parser.parse_args()
    checkout = options.workdir.resolve() / "checkout"
    checkout.mkdir(parents=True)
    wheel = options.wheel.resolve() if options.wheel else None
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH"}}
    env.pop("DATABASE_URL", None)
    if wheel is None:  # this interpreter's virtualenv: its python, pip and django-admin first
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        ["bash", "-c", script(quick_start(options.page.resolve()), wheel, options.python)],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    print(done.stdout, end="")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
