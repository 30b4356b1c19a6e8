"""REDbot, the HTTP linter, over one resource of each kind spindle serves (a
file, an index page, a directory redirect, a 404, a large file with ranges,
a gzip sidecar, a listing; redbot_notes.py builds the site): it checks each
as a cache and a browser would (content negotiation, ranges, ETag and
Last-Modified validation), and none of its notes may be BAD."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import redbot_notes
import util

pytestmark = pytest.mark.semantics


def test_redbot_finds_nothing_bad(model, fresh_server, tmp_path):
    root = tmp_path / "site"
    redbot_notes.build_site(root)
    srv = fresh_server(root=root, **redbot_notes.SETTINGS)
    base = f"http://{util.HOST}:{srv.port}"
    # A process of its own: REDbot's event loop (thor) is global state.
    r = subprocess.run([sys.executable, str(Path(redbot_notes.__file__)), "--url",
                        *(base + p for p in redbot_notes.RESOURCES)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    checked = [ln for ln in lines if ln.startswith("== ")]
    assert len(checked) == len(redbot_notes.RESOURCES), r.stdout
    bad = [ln for ln in lines if ln.startswith(("BAD", "ERROR"))]
    assert not bad, "REDbot's BAD notes:\n" + "\n".join(bad) + "\n\nall its notes:\n" + r.stdout
