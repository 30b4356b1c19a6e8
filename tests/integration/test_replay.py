"""Byte-for-byte replay of replay_corpus.json (made by replay.py): every
recorded request, sent again, must be answered with exactly the recorded
bytes (Date, Expires and multipart boundaries normalised). One model by
default; SPINDLE_TEST_ALL_MODELS=1 replays the same corpus on every model. A failure shows
the first byte that differs; if the change is meant, record again
(replay.py's docstring says how) and review the diff."""
from __future__ import annotations

import json

import pytest

import replay
import util

pytestmark = pytest.mark.semantics

CORPUS = json.loads(replay.CORPUS.read_text())
RECORDED = {e["case"]: e for e in CORPUS["cases"]}
CASES = replay.cases()


def test_corpus_matches_cases():
    """The corpus holds exactly the cases replay.py defines, with the same requests."""
    ids = [replay.case_id(s, n) for s, n, _ in CASES]
    assert sorted(ids) == sorted(RECORDED), "replay.py and the corpus disagree: record again"
    for server, name, steps in CASES:
        want = [replay.as_text(s) if isinstance(s, bytes) else ["wait", replay.as_text(s[1])] for s in steps]
        assert RECORDED[replay.case_id(server, name)]["request"] == want, name


@pytest.fixture(scope="module")
def servers(tmp_path_factory, model_name):
    tmp = tmp_path_factory.mktemp(f"replay-{model_name}")
    root = tmp / "www"
    root.mkdir()
    replay.build_site(root)
    servers = replay.start_servers(root, tmp, model_name)
    yield servers
    for s in servers.values():
        s.stop()


def _first_difference(a: bytes, b: bytes) -> str:
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return (f"first difference at byte {i} (recorded {len(a)} bytes, got {len(b)}):\n"
            f"recorded: {a[max(0, i - 80):i + 80]!r}\ngot:      {b[max(0, i - 80):i + 80]!r}")


@pytest.mark.parametrize("case", CASES, ids=[replay.case_id(s, n) for s, n, _ in CASES])
def test_replay(servers, case):
    server, name, steps = case
    want = RECORDED[replay.case_id(server, name)]["response"].encode("latin-1")
    got = replay.normalize(replay.run_case(servers[server].port, steps))
    assert got == want, _first_difference(want, got)
    for s in servers.values():
        s.assert_alive(f"after {name} ")
