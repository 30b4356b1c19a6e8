#!/usr/bin/env python3
"""Prints every test skipped by `make test`, with its reason, from the
reports its runs wrote - so a skip is never buried in the middle of a long
log: the JUnit XML of each pytest run, and the JSON of each unit-test run
(Criterion's XML drops a skip's reason, and its summary line does not count
skips at all, so a cr_skip_test() would pass unseen otherwise).

usage: skip-summary.py REPORT_DIR
"""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def pytest_skips(report: Path):
    for case in ET.parse(report).getroot().iter("testcase"):
        for skipped in case.findall("skipped"):
            reason = (skipped.get("message") or skipped.text or "").strip()
            yield reason, f"{case.get('classname', '')}::{case.get('name', '')}"


def criterion_skips(report: Path):
    for suite in json.loads(report.read_text()).get("test_suites", []):
        for test in suite.get("tests", []):
            if test.get("status") == "SKIPPED":
                reason = "; ".join(test.get("messages") or []) or "(no reason given)"
                yield reason, f"{suite.get('name', '')}::{test.get('name', '')}"


def main() -> int:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    reports = sorted(directory.glob("*.xml")) + sorted(directory.glob("*.json")) if directory else []
    skips = []
    for report in reports:
        found = pytest_skips(report) if report.suffix == ".xml" else criterion_skips(report)
        skips += [(report.stem, reason, test) for reason, test in found]
    print(f"\n=== skipped tests in make test: {len(skips)} (from {len(reports)} report(s)) ===")
    by_reason: dict[tuple[str, str], list[str]] = {}
    for run, reason, test in skips:
        by_reason.setdefault((run, reason), []).append(test)
    for (run, reason), tests in sorted(by_reason.items()):
        print(f"[{run}] {len(tests)} x {reason}")
        for t in tests:
            print(f"    {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
