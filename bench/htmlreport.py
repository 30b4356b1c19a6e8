"""report.md -> index.html beside it: one self-contained page rendered from
the Markdown itself (python-markdown), so the two never disagree. A table of
contents, every heading and every table anchored (a table's id is its
section's plus its number there), tables sortable by a click on a column
head (a few lines of inline JavaScript), the plots inline as data: URIs, and
no reference outside the page: no stylesheet, script or image is fetched."""
from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

import markdown

CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1b1b;background:#fff}
nav{position:fixed;top:0;left:0;bottom:0;width:17rem;overflow-y:auto;padding:1rem;background:#f5f5f7;
border-right:1px solid #ddd;font-size:13px}
nav ul{padding-left:1rem;margin:.2rem 0}nav a{color:#1b1b1b;text-decoration:none}nav a:hover{text-decoration:underline}
main{margin-left:19rem;padding:1rem 2rem 4rem;max-width:96rem}
h1{font-size:1.6rem}h2{margin-top:2.5rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.8rem 0;font-size:13px}
caption{text-align:left;font-size:12px;color:#666;caption-side:top}caption a{color:#666}
th,td{border:1px solid #ccc;padding:.25rem .5rem;vertical-align:top}
th{background:#eef;cursor:pointer;user-select:none}th[aria-sort=ascending]::after{content:" ▲"}
th[aria-sort=descending]::after{content:" ▼"}tr:nth-child(even) td{background:#fafafa}
img{max-width:100%;border:1px solid #eee}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;font-size:12px}
code{background:#f2f2f2;padding:0 .2rem}.summary{background:#f3f8ff;border:1px solid #bcd;padding:.2rem 1rem}
@media (max-width:900px){nav{position:static;width:auto;border:0}main{margin-left:0}}
"""

# Click a column head: sort by it (numbers as numbers: the first number in a
# cell, thousands separators ignored; text otherwise), again to reverse.
JS = """
document.querySelectorAll("table.sortable").forEach(function (t) {
  t.querySelectorAll("thead th").forEach(function (th, i) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      t.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var key = function (tr) {
        var s = (tr.children[i] || {}).textContent || "";
        var m = s.replace(/,/g, "").match(/[-+]?\\d*\\.?\\d+(e[-+]?\\d+)?/i);
        return m ? [0, parseFloat(m[0]), s] : [1, 0, s];
      };
      var rows = Array.prototype.slice.call(t.tBodies[0].rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), c = x[0] - y[0] || x[1] - y[1] || x[2].localeCompare(y[2]);
        return asc ? c : -c;
      });
      rows.forEach(function (r) { t.tBodies[0].appendChild(r); });
    });
  });
});
"""


def data_uri(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _inline_images(body: str, base: Path) -> str:
    def sub(m: re.Match) -> str:
        src = html.unescape(m.group(2))
        if src.startswith("data:"):
            return m.group(0)
        f = (base / src).resolve()
        if not f.is_file() or base.resolve() not in f.parents:
            # never a reference outside the page: a missing plot says so
            return f'<strong>[plot {html.escape(src)} missing]</strong><img alt="{m.group(1)}" src="data:,"'
        return f'<img alt="{m.group(1)}" src="{data_uri(f)}"'
    return re.sub(r'<img alt="([^"]*)" src="([^"]+)"', sub, body)


def _anchor_tables(body: str) -> str:
    """id = the section's heading id + '-table-N'; a caption links to it."""
    out, section, count = [], "top", {}
    for part in re.split(r"(<h[1-6][^>]*>|<table>)", body):
        h = re.match(r'<h[1-6] id="([^"]+)"', part)
        if h:
            section = h.group(1)
        if part == "<table>":
            count[section] = count.get(section, 0) + 1
            tid = f"{section}-table-{count[section]}"
            part = (f'<table id="{tid}" class="sortable"><caption><a href="#{tid}">table {count[section]} '
                    f'of this section</a> (click a column head to sort)</caption>')
        out.append(part)
    return "".join(out)


def _box_summary(body: str) -> str:
    """The summary of findings, set apart at the top of the page."""
    m = re.search(r'<h2 id="summary-of-findings">.*?(?=<h2 |\Z)', body, re.S)
    if not m:
        return body
    return body[:m.start()] + f'<section class="summary">{m.group(0)}</section>\n' + body[m.end():]


def _external_links(body: str) -> list[str]:
    return re.findall(r'(?:src|href)="((?:https?:)?//[^"]+)"', body)


def render(md_text: str, base: Path, title: str = "spindle lab report") -> str:
    md = markdown.Markdown(extensions=["tables", "fenced_code", "toc", "sane_lists"],
                           extension_configs={"toc": {"toc_depth": "2-3"}})
    body = md.convert(md_text)
    body = _box_summary(_anchor_tables(_inline_images(body, base)))
    # links to the run's own files (results.csv, raw/...) stay relative: they
    # are beside the page wherever it is served; nothing outside is linked
    for url in _external_links(body):
        body = body.replace(f'"{url}"', f'"#" title="{html.escape(url)}"')
    h1 = re.search(r"<h1[^>]*>(.*?)</h1>", body, re.S)
    page_title = re.sub("<[^>]+>", "", h1.group(1)) if h1 else title
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(page_title)}</title><style>{CSS}</style></head>\n<body>\n"
            f"<nav><strong>Contents</strong>{md.toc}</nav>\n<main>\n{body}\n</main>\n"
            f"<script>{JS}</script>\n</body></html>\n")


def write(out: Path) -> Path:
    """out/report.md -> out/index.html."""
    page = render((out / "report.md").read_text(), out)
    (out / "index.html").write_text(page)
    return out / "index.html"


if __name__ == "__main__":      # python -m bench.htmlreport DIR: DIR/report.md -> DIR/index.html
    import sys
    for d in sys.argv[1:] or ["docs/bench"]:
        print(write(Path(d)))
