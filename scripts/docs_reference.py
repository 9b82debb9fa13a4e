"""The reference pages' tables, generated from the code when the documentation site is built.

MkDocs runs this file as a hook (`hooks:` in mkdocs.yml): a page that holds a line
`<!-- reference: NAME -->` gets the markdown of `NAME` in its place, read from the code as it is
(the settings' defaults, the system checks, the exceptions and error codes, the management
commands' options, the REST API's OpenAPI schema, the signals, the task's fields, statuses and
transitions). A reference that cannot be made (a setting without a description, say) fails the
build. Run alone, it prints one of them: `python scripts/docs_reference.py settings`.
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import re
import sys
import textwrap
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- reference: ([a-z_-]+) -->$", re.MULTILINE)


class ReferenceError(Exception):
    """A reference table could not be made from the code."""


def setup_django() -> None:
    """Django set up with the example project's settings (the API installed; nothing queried)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    os.environ.setdefault("DATABASE_URL", "sqlite:///:memory:")
    import django

    django.setup()


def cell(text: object) -> str:
    """Text fit for one cell of a markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def shown(value: object) -> str:
    """A setting's default as the docs write it."""
    if isinstance(value, timedelta):
        from scylla_django.durations import short

        return short(value)
    mib = 1024 * 1024
    if isinstance(value, int) and not isinstance(value, bool) and value >= mib and value % mib == 0:
        return f"{value // mib} MiB"
    return f"`{value!r}`"


# -- settings ---------------------------------------------------------------------------------


def settings() -> str:
    """Every key of `SCYLLA`, its default (from `conf.DEFAULTS`) and its meaning (the table of
    `conf`'s docstring, which must describe every key)."""
    from scylla_django import conf

    meanings = dict(re.findall(r"^\| `([A-Z_]+)` \| [^|]+ \| (.+) \|$", conf.__doc__ or "", re.M))
    missing = [name for name in conf.DEFAULTS if name not in meanings]
    if missing:
        raise ReferenceError(f"scylla_django/conf.py's docstring does not describe {missing}")
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for name, default in conf.DEFAULTS.items():
        rows.append(f"| `{name}` | {shown(default)} | {cell(meanings[name])} |")
    return "\n".join(rows)


# -- system checks ----------------------------------------------------------------------------

CHECK_ID = re.compile(r"\b(?:scylla_django\.)?([EW]\d{3})\b")


def checks() -> str:
    """Every system check the app registers, by id, with its docstring."""
    from django.core.checks.registry import registry

    found: list[tuple[str, list[str], str, bool]] = []
    deploy = registry.deployment_checks
    for check in sorted(registry.registered_checks | deploy, key=lambda c: c.__name__):
        if not check.__module__.startswith("scylla_django"):
            continue
        doc = inspect.getdoc(check) or ""
        ids = sorted(dict.fromkeys(CHECK_ID.findall(doc.split("\n\n")[0])))
        if not ids:
            raise ReferenceError(f"the check {check.__module__}.{check.__name__} names no id")
        found.append((ids[0], ids, doc, check in deploy))
    found.extend(backend_checks())
    out = []
    for _, ids, doc, is_deploy in sorted(found):
        names = ", ".join(f"`scylla_django.{i}`" for i in ids)
        when = " (run by `check --deploy`)" if is_deploy else ""
        out.append(f"### {names}{when}\n\n{doc}\n")
    page = "\n".join(out)
    written = set(re.findall(r"""\bid=["']scylla_django\.([EW]\d{3})["']""", package_source()))
    missing = sorted(written - {i for _, ids, _, _ in found for i in ids})
    if missing:
        raise ReferenceError(f"no check's docstring names {missing}: say what each reports")
    return page


def backend_checks() -> list[tuple[str, list[str], str, bool]]:
    """The checks of the `django.tasks` backend (run by Django's check of every backend), as
    the paragraph of `scylla_django.backends`' docstring that names them."""
    from scylla_django import backends

    for paragraph in (inspect.getdoc(backends) or "").split("\n\n"):
        if "manage.py check" in paragraph:
            ids = sorted(dict.fromkeys(CHECK_ID.findall(paragraph)))
            return [(ids[0], ids, "The `django.tasks` backend (`TASKS`). " + paragraph, False)]
    raise ReferenceError("scylla_django/backends.py's docstring no longer names its checks")


def package_source() -> str:
    """The text of every module of the package (not its migrations)."""
    package = ROOT / "scylla_django"
    return "\n".join(
        path.read_text() for path in sorted(package.rglob("*.py")) if "migrations" not in path.parts
    )


# -- exceptions and error codes ---------------------------------------------------------------


def exceptions() -> str:
    """The exceptions of `scylla_django.exceptions`, each with its `code`."""
    from scylla_django import exceptions as module

    rows = ["| exception | base | `code` | what it means |", "|---|---|---|---|"]
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__ or not issubclass(cls, BaseException):
            continue
        base = cls.__mro__[1].__name__
        code = getattr(cls, "code", None)
        code = f"`{code}`" if isinstance(code, str) else "given"
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
        rows.append(f"| `{name}` | `{base}` | {code} | {cell(doc)} |")
    return "\n".join(rows)


ERROR_CODE = re.compile(r"""(?:\bcode=|["']code["']:\s*|\bAbort\(\s*)["']([a-z][a-z0-9_]+)["']""")


def error_codes() -> str:
    """Every error code the package writes (a `code=` argument, a `"code":` key, an `Abort`),
    with the modules that write it."""
    where: dict[str, set[str]] = {}
    package = ROOT / "scylla_django"
    for path in sorted(package.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        module = module.removesuffix(".__init__")
        for code in ERROR_CODE.findall(path.read_text()):
            where.setdefault(code, set()).add(f"`{module}`")
    rows = ["| code | written by |", "|---|---|"]
    for code in sorted(where):
        rows.append(f"| `{code}` | {', '.join(sorted(where[code]))} |")
    return "\n".join(rows)


# -- management commands ----------------------------------------------------------------------


def commands() -> str:
    """Each `manage.py scylla_*` command's `--help`, and its operations' (subcommands')."""
    from django.core.management import get_commands, load_command_class

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: the same on every build
    out = []
    for name, app in sorted(get_commands().items()):
        if app != "scylla_django":
            continue
        command = load_command_class(app, name)
        parser = command.create_parser("manage.py", name)
        out.append(f"## `{name}`\n\n{cell(command.help)}\n\n```text\n{parser.format_help()}```\n")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for operation, sub in action.choices.items():
                    help_text = sub.format_help()
                    out.append(f"### `{name} {operation}`\n\n```text\n{help_text}```\n")
    return "\n".join(out)


# -- the REST API -----------------------------------------------------------------------------

METHODS = ("get", "post", "put", "patch", "delete")


def api_schema() -> dict[str, Any]:
    """The OpenAPI schema drf-spectacular makes of `scylla_django.api.urls`, as served at
    `/schema/` (paths relative to where the project includes the API)."""
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator(urlconf="scylla_django.api.urls")
    schema: dict[str, Any] = generator.get_schema(request=None, public=True)
    return schema


def schema_type(schema: dict[str, Any]) -> str:
    """A short name for a schema: its component's name, or its type."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "allOf" in schema:
        return " & ".join(schema_type(s) for s in schema["allOf"])
    if "oneOf" in schema:
        return " or ".join(schema_type(s) for s in schema["oneOf"])
    kind = schema.get("type", "object")
    if kind == "array":
        return f"list of {schema_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " ".join(f"`{v}`" for v in schema["enum"] if v is not None)
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def api() -> str:
    """Every operation of the REST API, then every schema its bodies use."""
    schema = api_schema()
    from scylla_django import __version__

    out = [
        f"The schema of scylla_django {__version__}; paths are relative to "
        "where your `urls.py` includes `scylla_django.api.urls`.\n"
    ]
    for path, item in schema["paths"].items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            out.append(f"### `{method.upper()} {path}`\n")
            text = operation.get("description") or operation.get("summary") or ""
            if text:
                out.append(textwrap.dedent(text).strip() + "\n")
            parameters = [p for p in operation.get("parameters", []) if p.get("in") != "path"]
            if parameters:
                out.append("| parameter | in | type | meaning |\n|---|---|---|---|")
                for p in parameters:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {schema_type(p.get('schema', {}))} "
                        f"| {cell(p.get('description', ''))} |"
                    )
                out.append("")
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out.append(f"Body: {schema_type(body.get('schema', {}))}\n")
            answers = []
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {}).get("application/json")
                what = (
                    schema_type(content["schema"])
                    if content
                    else cell(response.get("description", ""))
                )
                answers.append(f"`{status}` {what}")
            if answers:
                out.append("Answers: " + "; ".join(answers) + "\n")
    out.append("## Schemas\n")
    for name, component in sorted(schema.get("components", {}).get("schemas", {}).items()):
        out.append(f"### {name}\n")
        if component.get("description"):
            out.append(cell(component["description"]) + "\n")
        properties = component.get("properties")
        if not properties:
            out.append(f"{schema_type(component)}\n")
            continue
        required = set(component.get("required", []))
        out.append("| field | type | | meaning |\n|---|---|---|---|")
        for field, spec in properties.items():
            marks = ", ".join(
                mark
                for mark, on in (
                    ("read-only", spec.get("readOnly")),
                    ("write-only", spec.get("writeOnly")),
                    ("required", field in required and not spec.get("readOnly")),
                    ("nullable", spec.get("nullable")),
                )
                if on
            )
            meaning = cell(spec.get("description", ""))
            out.append(f"| `{field}` | {schema_type(spec)} | {marks} | {meaning} |")
        out.append("")
    return "\n".join(out)


# -- signals ----------------------------------------------------------------------------------


def signals() -> str:
    """Each signal of `scylla_django.signals`, with the comment written beside it."""
    from django.dispatch import Signal

    from scylla_django import signals as module

    source = Path(inspect.getfile(module)).read_text()
    comments = dict(re.findall(r"^(\w+) = Signal\([^)]*\)(?:\s*#\s*(.*))?$", source, re.M))
    rows = ["| signal | sent |", "|---|---|"]
    for name, value in vars(module).items():
        if isinstance(value, Signal):
            rows.append(f"| `{name}` | {cell(comments.get(name) or 'see above')} |")
    return (inspect.getdoc(module) or "") + "\n\n" + "\n".join(rows)


# -- the task ---------------------------------------------------------------------------------


def task_columns() -> str:
    """The `Task` model's columns, as Django defines them: first those `Task` declares (the
    state machine's), then each feature's, under the abstract model that declares them
    (`models/task_columns.py`)."""
    from scylla_django.models import Task

    declared_by: dict[str, str] = {}
    for base in Task.__mro__[1:]:
        meta = getattr(base, "_meta", None)
        if meta is not None and meta.abstract:
            for field in meta.local_fields:
                declared_by.setdefault(field.name, base.__name__)
    own = [f for f in Task._meta.concrete_fields if f.name not in declared_by]
    features = [f for f in Task._meta.concrete_fields if f.name in declared_by]
    rows = ["| column | Django field | null | declared by |", "|---|---|---|---|"]
    for field in [*own, *features]:
        null = "yes" if field.null else "no"
        owner = declared_by.get(field.name, "Task")
        rows.append(f"| `{field.name}` | `{type(field).__name__}` | {null} | `{owner}` |")
    return "\n".join(rows)


def statuses() -> str:
    """The five statuses, and which are terminal."""
    from scylla_django.enums import Status

    rows = ["| status | terminal |", "|---|---|"]
    for status in Status:
        rows.append(f"| `{status.value}` | {'yes' if status.is_terminal else 'no'} |")
    return "\n".join(rows)


def transitions() -> str:
    """The allowed-transition table of `scylla_django.enums`, as every operation reads it."""
    from scylla_django.enums import TRANSITIONS

    rows = ["| operation | from | to | History | only the lease's owner |", "|---|---|---|---|---|"]
    for operation, transition in TRANSITIONS.items():
        sources = ", ".join(f"`{s.value}`" for s in sorted(transition.sources))
        event = f"`{transition.event.value}`" if transition.event else "—"
        owner = "yes" if transition.owner_only else "no"
        rows.append(
            f"| `{operation.value}` | {sources} | `{transition.target.value}` | {event} | {owner} |"
        )
    return "\n".join(rows)


def history_events() -> str:
    """The History entry types (`_typ`)."""
    from scylla_django.enums import EventType

    return "\n".join(f"- `{event.value}`: {event.label}" for event in EventType)


REFERENCES: dict[str, Callable[[], str]] = {
    "settings": settings,
    "checks": checks,
    "exceptions": exceptions,
    "error-codes": error_codes,
    "commands": commands,
    "api": api,
    "signals": signals,
    "task-columns": task_columns,
    "statuses": statuses,
    "transitions": transitions,
    "history-events": history_events,
}


def render(markdown: str) -> str:
    """`markdown` with each `<!-- reference: NAME -->` line replaced by that reference."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in REFERENCES:
            raise ReferenceError(f"no reference called {name!r}: one of {sorted(REFERENCES)}")
        return REFERENCES[name]()

    return MARKER.sub(replace, markdown)


# -- the MkDocs hook --------------------------------------------------------------------------


def on_startup(command: str, dirty: bool) -> None:
    setup_django()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return render(markdown)


if __name__ == "__main__":
    setup_django()
    wanted = sys.argv[1:] or sorted(REFERENCES)
    buffer = io.StringIO()
    for name in wanted:
        buffer.write(REFERENCES[name]() + "\n")
    sys.stdout.write(buffer.getvalue())
