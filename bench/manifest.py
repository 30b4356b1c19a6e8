"""What a run ran on and with: the machine as a reader judging the figures needs it
(hypervisor or bare metal, CPU, SMT, caches, frequency policy, mitigations,
hardware counters, kernel and its accounting), pinning, every tool's version,
configuration."""
from __future__ import annotations

import gzip
import os
import platform
import re
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


def _read(path: str | Path, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _first_line(cmd: list[str], default: str = "not installed") -> str:
    text = _out(cmd)
    if not text or text.startswith("unavailable:"):
        return default
    return text.splitlines()[0].strip()


def virtualization() -> dict:
    """Hypervisor or bare metal, from every source that says: systemd-detect-virt
    (--vm and --container apart: a container in a VM is both), the CPU's
    `hypervisor` flag, lscpu's vendor, DMI and the boot log."""
    vm = _out(["systemd-detect-virt", "--vm"])
    ct = _out(["systemd-detect-virt", "--container"])
    flags = ""
    for ln in _read("/proc/cpuinfo").splitlines():
        if ln.startswith("flags"):
            flags = ln
            break
    lscpu = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in _out(["lscpu"]).splitlines())}
    dmi = {k: _read(f"/sys/class/dmi/id/{k}") for k in ("sys_vendor", "product_name") if _read(f"/sys/class/dmi/id/{k}")}
    vm_name = vm if vm and vm != "none" and not vm.startswith("unavailable") else ""
    hyper = " hypervisor" in flags + " "
    kind = (f"virtual machine ({vm_name or lscpu.get('Hypervisor vendor', 'hypervisor')})" if vm_name or hyper
            else "bare metal (no hypervisor flag, systemd-detect-virt --vm: none)")
    return {"kind": kind, "systemd_detect_virt_vm": vm, "systemd_detect_virt_container": ct,
            "cpu_hypervisor_flag": hyper, "hypervisor_vendor": lscpu.get("Hypervisor vendor", "none"),
            "dmi": dmi or "not exposed (/sys/class/dmi absent)"}


def _cpu_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        if a.strip().isdigit():
            out += list(range(int(a), int(b) + 1)) if b.strip().isdigit() else [int(a)]
    return out


def cpu_description(base: Path = Path("/sys/devices/system/cpu")) -> dict:
    """Model, SMT siblings, caches and frequency policy from sysfs."""
    info = {}
    for ln in _read("/proc/cpuinfo").splitlines():
        k, _, v = ln.partition(":")
        k = k.strip()
        if k in ("vendor_id", "cpu family", "model", "stepping", "model name", "microcode", "cpu MHz") \
                and k not in info:
            info[k] = v.strip()
    cpus = sorted(int(d.name[3:]) for d in base.glob("cpu[0-9]*"))
    siblings = {c: _read(base / f"cpu{c}/topology/thread_siblings_list", "?") for c in cpus}
    caches = []
    for idx in sorted((base / "cpu0/cache").glob("index*")):
        caches.append({k: _read(idx / k, "?") for k in ("level", "type", "size", "shared_cpu_list")})
    policies = sorted((base / "cpufreq").glob("policy*"))
    if policies:
        freq = {p.name: {k: _read(p / k, "?") for k in ("scaling_driver", "scaling_governor", "scaling_min_freq",
                                                          "scaling_max_freq", "cpuinfo_max_freq")}
                for p in policies}
    else:
        freq = (f"none exposed (no cpufreq policy in {base}/cpufreq: the frequency is the host's to set; "
                f"/proc/cpuinfo says {info.get('cpu MHz', '?')} MHz)")
    boost = _read(base / "cpufreq/boost", "not exposed")
    smt = {"control": _read(base / "smt/control", "not exposed"), "active": _read(base / "smt/active", "?"),
           "siblings": siblings,
           "threads_per_core": max((len(_cpu_list(v)) for v in siblings.values()), default=1)}
    return {"model": info.get("model name", "unknown"), "vendor": info.get("vendor_id", "?"),
            "family_model_stepping": f"{info.get('cpu family', '?')}/{info.get('model', '?')}/{info.get('stepping', '?')}",
            "microcode": info.get("microcode", "not exposed"), "cpus_online": _read(base / "online", "?"),
            "isolated": _read(base / "isolated", "") or "none", "smt": smt, "caches_cpu0": caches,
            "frequency_policy": freq, "boost": boost}


def mitigations(base: Path = Path("/sys/devices/system/cpu/vulnerabilities")) -> dict:
    return {f.name: _read(f) for f in sorted(base.glob("*"))} or {"-": f"not exposed ({base} absent)"}


def perf_counters() -> dict:
    """Whether hardware performance counters can be read here (cycles and
    instructions per request need them): perf's answer and the PMUs the kernel
    lists."""
    pmus = sorted(d.name for d in Path("/sys/bus/event_source/devices").glob("*"))
    r = _out(["perf", "stat", "-x,", "-e", "instructions", "true"])
    if r.startswith("unavailable"):
        state = "unknown: perf not installed (scripts/install-deps.sh bench installs linux-perf)"
    elif "not supported" in r or "<not counted>" in r:
        state = "no: perf stat -e instructions says <not supported> (no CPU PMU exposed to this kernel)"
    elif re.search(r"^\d+,,instructions", r, re.M):
        state = "yes: perf stat -e instructions counts"
    else:
        state = f"unknown: perf stat said {r[:200]!r}"
    return {"hardware_counters": state, "pmus": pmus, "perf_event_paranoid": _read("/proc/sys/kernel/perf_event_paranoid", "?"),
            "perf": _first_line(["perf", "--version"])}


def kernel_config(keys=("CONFIG_HZ", "CONFIG_IRQ_TIME_ACCOUNTING", "CONFIG_TICK_CPU_ACCOUNTING",
                        "CONFIG_VIRT_CPU_ACCOUNTING_GEN", "CONFIG_NO_HZ_FULL", "CONFIG_PREEMPT_DYNAMIC",
                        "CONFIG_SCHED_INFO", "CONFIG_CGROUP_CPUACCT")) -> dict:
    """The kernel options the lab's CPU figures depend on (tick or precise
    accounting of interrupts, the tick rate), from /proc/config.gz or /boot."""
    text = ""
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        text = _read(f"/boot/config-{platform.uname().release}")
    if not text:
        return {"-": "not exposed (no /proc/config.gz or /boot/config-*)"}
    out = {}
    for k in keys:
        m = re.search(rf"^{k}=(\S+)$", text, re.M)
        out[k] = m.group(1) if m else "not set"
    return out


def machine_description() -> dict:
    mem = next((ln.split(":", 1)[1].strip() for ln in _read("/proc/meminfo").splitlines()
                if ln.startswith("MemTotal")), "?")
    return {"virtualization": virtualization(), "cpu": cpu_description(), "mitigations": mitigations(),
            "perf_counters": perf_counters(), "memory": mem,
            "kernel": {"release": platform.uname().release, "version": platform.uname().version,
                       "clocksource": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource", "?"),
                       "config": kernel_config()}}


def machine_markdown(m: dict) -> str:
    """The machine as a table (the report's Machine section)."""
    if not m:
        return "Not recorded (a run from before the lab described its machine).\n"
    v, c, p, k = m["virtualization"], m["cpu"], m["perf_counters"], m["kernel"]
    caches = "; ".join(f"L{x['level']} {x['type']} {x['size']} (shared by CPUs {x['shared_cpu_list']})"
                       for x in c["caches_cpu0"]) or "not exposed"
    freq = c["frequency_policy"]
    if isinstance(freq, dict):
        freq = "; ".join(f"{n}: {d['scaling_driver']}, governor {d['scaling_governor']}, "
                         f"{d['scaling_min_freq']}–{d['scaling_max_freq']} kHz" for n, d in freq.items())
    vuln = m["mitigations"]
    affected = [f"{n}: {t}" for n, t in vuln.items() if t != "Not affected"]
    rows = [
        ["hypervisor or bare metal", f"{v['kind']}; container: {v['systemd_detect_virt_container']}; "
                                     f"DMI: {v['dmi'] if isinstance(v['dmi'], str) else ', '.join(v['dmi'].values())}"],
        ["CPU", f"{c['model']} ({c['vendor']}, family/model/stepping {c['family_model_stepping']}, microcode "
                f"{c['microcode']}), CPUs {c['cpus_online']}, isolated: {c['isolated']}"],
        ["SMT", f"{c['smt']['threads_per_core']} thread(s) per core; siblings "
                + ", ".join(f"cpu{n}: {s}" for n, s in c["smt"]["siblings"].items())
                + f"; control {c['smt']['control']}"],
        ["caches (cpu0)", caches],
        ["frequency policy", f"{freq}; boost: {c['boost']}"],
        ["mitigations", "; ".join(affected) or "every listed vulnerability: Not affected"],
        ["hardware performance counters", f"{p['hardware_counters']}; PMUs: {', '.join(p['pmus']) or 'none'}"],
        ["kernel", f"{k['release']} ({k['version']}), clocksource {k['clocksource']}, "
                   + ", ".join(f"{n}={x}" for n, x in k["config"].items())],
        ["memory", m["memory"]],
    ]
    out = ["| what | this machine |", "|---|---|"]
    out += [f"| {a} | {b.replace('|', '/')} |" for a, b in rows]
    return "\n".join(out) + "\n"


def tool_versions(lab) -> dict:
    try:
        import matplotlib
        mpl = matplotlib.__version__
    except ImportError:
        mpl = "missing"
    try:
        import markdown
        md = markdown.__version__
    except ImportError:
        md = "missing"
    wrk = _out(["wrk", "-v"])
    return {
        "spindle": _out([str(lab.spindle_bin), "--version"]),
        "nginx": _out(["/usr/sbin/nginx", "-v"]),
        "lighttpd": _first_line([PEER_BINARIES["lighttpd"], "-v"]),
        "h2o": _first_line([PEER_BINARIES["h2o"], "--version"]),
        "wrk": wrk.splitlines()[0] if wrk and not wrk.startswith("unavailable") else "?",
        "ab": _first_line(["ab", "-V"]),
        "h2load": _first_line(["h2load", "--version"]),
        "curl": _first_line(["curl", "--version"]),
        "vegeta": _first_line([str(VEGETA), "-version"], "?").replace("Version: ", ""),
        "openssl": _first_line(["openssl", "version"]),
        "haproxy": _first_line(["haproxy", "-v"]),
        "taskset": _first_line(["taskset", "--version"]),
        "prlimit": _first_line(["prlimit", "--version"]),
        "perf": _first_line(["perf", "--version"]),
        "cc": _first_line(["cc", "--version"]),
        "glibc": _first_line(["ldd", "--version"]),
        "go": _first_line(["go", "version"]),
        "python": sys.version.split()[0],
        "matplotlib": mpl,
        "markdown": md,
    }


def manifest(lab, models, mode, repeats, started, elapsed, names) -> dict:
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
        "tools": tool_versions(lab),
        "machine": machine_description(),
        "sysctl": {k: _sysctl(k) for k in ("net.core.somaxconn", "net.ipv4.tcp_tw_reuse",
                                            "net.ipv4.ip_local_port_range", "net.ipv4.tcp_max_syn_backlog")},
    }
