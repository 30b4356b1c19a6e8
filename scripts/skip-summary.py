#!/usr/bin/env python3
"""Prints every test skipped by the pytest runs of `make test`, with its
reason, from the JUnit XML reports they wrote (one per run) - so a skip is
never buried in the middle of a long log.

usage: skip-summary.py REPORT_DIR
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main() -> int:
    reports = sorted(Path(sys.argv[1]).glob("*.xml")) if len(sys.argv) > 1 else []
    skips = []
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            for skipped in case.findall("skipped"):
                reason = (skipped.get("message") or skipped.text or "").strip()
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                skips.append((report.stem, reason, test))
    print(f"\n=== skipped tests in make test: {len(skips)} (from {len(reports)} pytest run(s)) ===")
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
