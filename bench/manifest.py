"""What a run ran on and with: machine, pinning, versions, configuration."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from .lab import ALL_CPUS, LOAD_CPUS, NOFILE, PEER_BINARIES, REPO, SERVER_CPUS, VEGETA


def _out(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable: {e}"


def git_revision(repo: Path = REPO) -> str:
    """HEAD's commit, read from .git's files (the lab runs no git command)."""
    g = repo / ".git"
    try:
        common = g
        if g.is_file():   # a git worktree: .git names its own directory, refs live in the common one
            g = Path(g.read_text().split("gitdir:", 1)[1].strip())
            common = (g / (g / "commondir").read_text().strip()).resolve() if (g / "commondir").exists() else g
        head = (g / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        for d in (g, common):
            if (d / ref).exists():
                return f"{(d / ref).read_text().strip()} ({ref.rsplit('/', 1)[-1]})"
        packed = common / "packed-refs"
        if packed.exists():
            for ln in packed.read_text().splitlines():
                if ln.endswith(" " + ref):
                    return f"{ln.split()[0]} ({ref.rsplit('/', 1)[-1]})"
        return f"unborn branch {ref}"
    except OSError as e:
        return f"unknown ({e})"


def cpu_model() -> str:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _sysctl(name: str) -> str:
    try:
        return Path("/proc/sys/" + name.replace(".", "/")).read_text().strip()
    except OSError:
        return "?"


def manifest(lab, models, mode, repeats, started, elapsed, names) -> dict:
    try:
        import matplotlib
        mpl = matplotlib.__version__
    except ImportError:
        mpl = "missing"
    check = _out([str(lab.spindle_bin), "--config", str(REPO / "server.conf"), "--check"])
    return {
        "mode": mode,
        "repeats": repeats,
        "experiments": names,
        "models": models,
        "started": started,
        "elapsed_s": round(elapsed, 1),
        "kernel": platform.uname().release,
        "uname": " ".join(platform.uname()),
        "cpu_model": cpu_model(),
        "cpus_online": os.cpu_count(),
        "pinning": {
            "server": SERVER_CPUS, "load_generator": LOAD_CPUS, "server_two_cores": ALL_CPUS,
            "note": f"servers run under `taskset -c {SERVER_CPUS}` (1 core, workers = 1, nginx "
                    f"worker_processes 1); the 2-core cells use `taskset -c {ALL_CPUS}` with workers = 2 "
                    f"and then share CPU {LOAD_CPUS} with the load generator, which always runs under "
                    f"`taskset -c {LOAD_CPUS}`.",
        },
        "rlimit_nofile": NOFILE,
        "loadavg_at_start": getattr(lab, "load_at_start", None),
        "loadavg_max_during": max((r.get("loadavg1", 0) for r in lab.records), default=None),
        "spindle_revision": git_revision(),
        "spindle_binary": str(lab.spindle_bin),
        "spindle_config_check": check,
        "nginx_confs": getattr(lab, "nginx_confs", {}),
        "peer_confs": getattr(lab, "peer_confs", {}),
        "tools": {
            "spindle": _out([str(lab.spindle_bin), "--version"]),
            "nginx": _out(["/usr/sbin/nginx", "-v"]),
            "lighttpd": (_out([PEER_BINARIES["lighttpd"], "-v"]).splitlines() or ["not installed"])[0],
            "h2o": (_out([PEER_BINARIES["h2o"], "--version"]).splitlines() or ["not installed"])[0],
            "wrk": _out(["wrk", "-v"]).splitlines()[0] if _out(["wrk", "-v"]) else "?",
            "ab": _out(["ab", "-V"]).splitlines()[0],
            "curl": _out(["curl", "--version"]).splitlines()[0],
            "vegeta": (_out([str(VEGETA), "-version"]).splitlines() or ["?"])[0].replace("Version: ", ""),
            "python": sys.version.split()[0],
            "matplotlib": mpl,
        },
        "sysctl": {k: _sysctl(k) for k in ("net.core.somaxconn", "net.ipv4.tcp_tw_reuse",
                                            "net.ipv4.ip_local_port_range", "net.ipv4.tcp_max_syn_backlog")},
    }
