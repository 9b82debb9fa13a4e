"""The package works without its optional extras: without OpenTelemetry nothing is traced and
nothing fails; without jsonschema a handler's schema is reported by a system check, not an
import error. Each runs in a child Python in which the package cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.processes import ROOT, child_env

WITHOUT = textwrap.dedent(
    """
    import sys
    sys.modules["opentelemetry"] = None  # as if it were not installed
    sys.modules["jsonschema"] = None
    import django
    django.setup()
    from django.core.checks import run_checks
    from scylla_django import handler, spec_versions, tracing

    assert not tracing.available() and not tracing.enabled()
    assert tracing.current_traceparent() is None
    with tracing.incoming("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
        assert tracing.current_traceparent().startswith("00-4bf92f35")
    with tracing.process_span("q", [], [], "worker-1", 0.0) as span:
        assert span is None
    with tracing.firing_span("s", "q"):
        pass

    @handler("extras.schema", schema={"type": "object"})
    def h(ctx):
        return None

    [error] = [m for m in run_checks() if m.id == "scylla_django.E050"]
    assert "pip install" in error.msg and "schema" in error.msg, error.msg
    try:
        spec_versions.schema_errors("extras.schema", {})
    except spec_versions.SchemaUnavailable:
        pass
    else:
        raise AssertionError("a schema was checked without jsonschema")
    print("ok")
    """
)


def test_the_package_works_without_opentelemetry_and_jsonschema():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
