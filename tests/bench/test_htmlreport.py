"""The HTML report (bench/htmlreport.py): one self-contained page rendered
from report.md, with a table of contents, an anchor on every heading and
every table, the plots inline, sortable tables and nothing fetched from
anywhere else; and the Markdown report and the page written together show
the same tables."""
from __future__ import annotations

import base64
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import htmlreport, report  # noqa: E402

# a 1x1 PNG
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


class Page(HTMLParser):
    """Every tag with its attributes, the text of each table's cells."""
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    return p


def no_external_reference(p: Page) -> None:
    for tag, a in p.tags:
        assert tag != "link", f"a stylesheet or resource is linked: {a}"
        assert not (tag == "script" and a.get("src")), f"an external script: {a}"
        for k in ("src", "href"):
            v = a.get(k, "")
            assert not re.match(r"(https?:)?//", v), f"<{tag} {k}={v}> leaves the page"
            if tag == "img":
                assert v.startswith("data:") if k == "src" else True, f"<img src={v[:60]}> is not inline"


MD = """# spindle lab report — default run

Intro paragraph with `code` and a [link out](https://example.com/x).

## Summary of findings

- one finding

## Seed 000 — ab -c 30

| server | req/s |
|---|---|
| epoll | 12,345 |
| fork | 2,001 |

| server | p99 ms |
|---|---|
| epoll | 3 |

![seed 000 throughput](seed000_throughput.png)

## Machine

| what | this machine |
|---|---|
| CPU | AMD EPYC |

```nginx
worker_processes 1;
```
"""


def test_page_has_a_toc_anchored_sortable_tables_and_inline_plots(tmp_path):
    (tmp_path / "report.md").write_text(MD)
    (tmp_path / "seed000_throughput.png").write_bytes(PNG)
    page_path = htmlreport.write(tmp_path)
    page = page_path.read_text()
    p = parse(page)
    ids = {a["id"] for _, a in p.tags if "id" in a}
    # a table of contents linking every section
    nav = page[page.index("<nav>"):page.index("</nav>")]
    for h in ("Summary of findings", "Seed 000 — ab -c 30", "Machine"):
        m = re.search(r'<a href="#([^"]+)">' + re.escape(h), nav)
        assert m and m.group(1) in ids, f"{h!r} not in the table of contents"
    # every table anchored (its own id, a link to itself), sortable, its cells intact
    tables = [a for t, a in p.tags if t == "table"]
    assert len(tables) == 3 == len(p.tables)
    assert len({a["id"] for a in tables}) == 3
    for a in tables:
        assert "sortable" in a["class"] and f'href="#{a["id"]}"' in page
    assert tables[0]["id"].startswith("seed-000") and tables[0]["id"].endswith("-table-1")
    assert tables[1]["id"].endswith("-table-2") and tables[2]["id"].startswith("machine")
    assert p.tables[0] == [["server", "req/s"], ["epoll", "12,345"], ["fork", "2,001"]]
    # the plot inline, as the file's own bytes
    imgs = [a for t, a in p.tags if t == "img"]
    assert len(imgs) == 1 and base64.b64decode(imgs[0]["src"].split(",", 1)[1]) == PNG
    assert "addEventListener(\"click\"" in page
    assert "worker_processes 1;" in page
    assert re.search(r'<section class="summary"><h2 id="summary-of-findings">.*one finding.*</section>', page, re.S)
    no_external_reference(p)


def test_a_missing_plot_is_said_not_fetched(tmp_path):
    (tmp_path / "report.md").write_text("# r\n\n![gone](gone.png)\n\n![out](../../etc/passwd)\n")
    page = htmlreport.write(tmp_path).read_text()
    assert "[plot gone.png missing]" in page and "[plot ../../etc/passwd missing]" in page
    no_external_reference(parse(page))


def _rec(exp, cell, server, rep, **m):
    base = {"exp": exp, "cell": cell, "server": server, "kind": "spindle", "model": server, "cpus": "0",
            "workers": 1, "rep": rep, "tool": "ab", "rps": 1000.0 + rep * 10, "mean_ms": 5.0, "p50_ms": 4.0,
            "p99_ms": 77.0, "errors": 0, "problems": [], "server_cpu_s": 1.0, "server_us_per_req": 10.0 + rep,
            "gen_share": 0.5, "client_bound": False, "other_cores": 0.01 * rep, "steal_cores": 0.0,
            "cpu_meter": "cgroup v1 cpuacct (ns)", "little_ratio": 0.9}
    return {**base, **m}


def test_the_lab_writes_the_page_beside_the_markdown_with_the_same_tables(tmp_path):
    records = []
    for rep in (1, 2, 3):
        for srv in ("epoll", "fork", "nginx"):
            records.append(_rec("seed000", f"{srv} ab -c 30", srv, rep, part="main", conc=30,
                                _params=["part", "conc"], client_bound=srv == "fork"))
    man = {"mode": "default", "started": "2026-11-26T01:00:00+00:00", "cpu_model": "AMD EPYC", "cpus_online": 2,
           "kernel": "6.18", "spindle_revision": "abc (labinst)", "elapsed_s": 60.0, "repeats": 3,
           "pinning": {"note": "server on CPU 0"}, "tools": {"ab": "ab 2.3", "nginx": "nginx/1.22.1"}}
    report.write(SimpleNamespace(records=records, notes={}, server_memory=[]), tmp_path, man)
    md = (tmp_path / "report.md").read_text()
    p = parse((tmp_path / "index.html").read_text())
    md_tables = re.findall(r"(?:^\|.*\|\n)+", md, re.M)
    assert len(md_tables) == len(p.tables) > 3
    for mt, ht in zip(md_tables, p.tables):
        rows = [ln for ln in mt.splitlines() if not re.fullmatch(r"\|(-+\|)+", ln)]
        assert len(rows) == len(ht)
    pngs = sorted(f.name for f in tmp_path.glob("*.png"))
    assert pngs and len([1 for t, a in p.tags if t == "img"]) == len(pngs)
    no_external_reference(p)
    assert "Summary of findings" in md


def test_the_summary_up_front_lists_the_verdicts_reached(tmp_path):
    rep = report.Report(SimpleNamespace(records=[], notes={}, server_memory=[]), tmp_path, {})
    rep.headline = [["Seed 003", "req/s, ab -k -c 200", "140k", "103k", "1.36 [1.30–1.42]", "epoll ahead",
                     "epoll ahead", "**yes**"],
                    ["Seed 000", "req/s, ab -c 30", "18.5k", "18.3k", "1.01 [0.97–1.05]", "unsettled (±4%)",
                     "—", "no"]]
    rep.claims = [{"seed": "001", "claim": "threaded is not fastest", "verdict": "holds"},
                  {"seed": "002", "claim": "more buckets help", "verdict": "unsettled (±9%)"}]
    text = rep.summary_section()
    assert "1 of 2 comparisons reached a verdict: Seed 003 req/s, ab -k -c 200: epoll ahead (ratio 1.36" in text
    assert "1 of them settled by this run and the published one alike" in text
    assert "2 checked: 1 holds, 1 unsettled" in text and "threaded is not fastest: **holds**" in text


def test_the_published_page_is_the_published_report_rendered():
    """docs/bench/index.html is report.md beside it, rendered: after any change
    to the report, `python -m bench.htmlreport docs/bench` writes it again."""
    pub = REPO / "docs" / "bench"
    assert (pub / "index.html").read_text() == htmlreport.render((pub / "report.md").read_text(), pub), \
        "docs/bench/index.html is stale: python -m bench.htmlreport docs/bench"
