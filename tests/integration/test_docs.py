"""The documentation a reader of the repository sees: README.md is a front
page that fits on a few screens, every page it and docs/ link to exists
(anchors included, as GitHub makes them), every page under docs/ is
reachable from the README, and no page names the project's internal issue
numbers, which a reader cannot look up."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import util

ROOT = util.REPO_ROOT
README = ROOT / "README.md"
FRONT_PAGE_MAX_LINES = 250
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [README, ROOT / "bench/README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but - and _ dropped,
    spaces as hyphens, a repeated id suffixed -1, -2, ..."""
    out: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if fenced or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(2).lower()).replace(" ", "-")
        n, base = 0, slug
        while slug in out:
            n += 1
            slug = f"{base}-{n}"
        out.add(slug)
    return out


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in LINK_RE.findall(text) if not re.match(r"[a-z]+:", t)]


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= FRONT_PAGE_MAX_LINES, f"README.md has {len(lines)} lines"
    text = "\n".join(lines)
    # the opening a new reader runs first: both set a fresh machine up
    assert re.search(r"^```sh\nmake run .*\nmake test .*\n```", text, re.M), "README no longer opens with make run/test"
    for section in ("Quick start", "Why pick spindle", "Models"):
        assert re.search(rf"^## {section}", text, re.M), f"README.md has no '{section}' section"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_anchor_resolves(page):
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.relative_to(ROOT)} links to {target}: no such file"
        assert ROOT.resolve() in dest.parents or dest == ROOT.resolve(), \
            f"{page.relative_to(ROOT)} links outside the repository: {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.relative_to(ROOT)} links to {target}: no such heading"


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t.partition("#")[0]).resolve() for t in links(page) if t.partition("#")[0]]
    wanted = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    assert not wanted - seen, f"not reachable from README.md: {sorted(str(p) for p in wanted - seen)}"


@pytest.mark.parametrize("page", [*pages(), ROOT / "server.conf"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_issue_numbers(page):
    found = re.findall(r"\b(?:issues?\s+#?\d+|the issue\b)", page.read_text(), re.I)
    assert not found, f"{page.relative_to(ROOT)} mentions {found}"
