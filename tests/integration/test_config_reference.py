"""server.conf, config.c and spindle.conf(5) never disagree: the
keys server.conf documents are the keys config.c accepts, the values it shows
are the defaults, and the man page (generated from server.conf at build time)
lists every key with its default and renders without warnings."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

import util

# Runs `make` in the repository, which writes build/man/: under pytest-xdist
# never beside test_install.py, which does too (conftest.py keeps this group),
# and never beside another session's (util.repo_make holds a lock).
pytestmark = pytest.mark.xdist_group("make-in-repository")

SERVER_CONF = util.REPO_ROOT / "server.conf"
MAN_DIR = util.REPO_ROOT / "build" / "man"
KEY_RE = re.compile(r"^([a-z_]+)\s*=\s*(.*?)\s*$")
PAGES = ("spindle.8", "spindle.conf.5", "spindle-stat.1")


def conf_keys(text: str) -> dict[str, tuple[str, str]]:
    """key -> (section, value) of the uncommented "key = value" lines."""
    out, section = {}, ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip("[] \t")
        elif (m := KEY_RE.match(line)) and not line.lstrip().startswith(("#", ";")):
            assert m.group(1) not in out, f"{m.group(1)} is set twice"
            out[m.group(1)] = (section, m.group(2))
    return out


def check(*args: str) -> str:
    r = util.run_spindle("--check", *args, cwd=util.REPO_ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def man_pages():
    """Builds the pages from the current server.conf (as `make install` does)."""
    r = util.repo_make("man", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return {p: MAN_DIR / p for p in PAGES}


def render(path, width: int = 200) -> str:
    r = subprocess.run(["man", "--warnings", "-l", str(path)], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, MANWIDTH=str(width)))
    assert r.returncode == 0 and r.stderr == "", f"{path.name}: man warns: {r.stderr}"
    return re.sub(".\b", "", r.stdout)  # overstrike bold and underline


def test_server_conf_documents_exactly_the_keys_config_c_accepts():
    documented = conf_keys(SERVER_CONF.read_text())
    accepted = conf_keys(check())  # config_print walks config.c's key table
    missing = sorted(set(accepted) - set(documented))
    unknown = sorted(set(documented) - set(accepted))
    assert not missing, f"config.c accepts keys server.conf does not document: {missing}"
    assert not unknown, f"server.conf documents keys config.c does not accept: {unknown}"
    for key, (section, _) in documented.items():
        assert accepted[key][0] == section, f"{key}: in [{section}] in server.conf, [{accepted[key][0]}] in config.c"


def test_check_prints_the_keys_in_server_conf_order():
    """config.c's rows follow server.conf, section by section, so --check
    reads as the sample file does."""
    documented = list(conf_keys(SERVER_CONF.read_text()).items())
    accepted = [(k, s) for k, (s, _) in conf_keys(check()).items()]
    assert [(k, s) for k, (s, _) in documented] == accepted


def test_check_prints_each_section_once():
    """Keys added in a block of their own at the end of config.c's table
    still print under their section's single header (a valid, tidy file)."""
    headers = [ln for ln in check().splitlines() if ln.startswith("[")]
    assert len(headers) == len(set(headers)), headers


def test_server_conf_shows_the_defaults():
    """Reading server.conf changes nothing: each value it shows is the default."""
    strip = lambda out: [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert strip(check("--config", str(SERVER_CONF))) == strip(check())


def test_man_page_lists_every_key_with_its_default(man_pages):
    text = render(man_pages["spindle.conf.5"])
    for key, (section, value) in conf_keys(SERVER_CONF.read_text()).items():
        # an empty default is shown as "(empty)"
        shown = rf"{re.escape(key)} = {re.escape(value or '(empty)')}"
        assert re.search(rf"^\s+{shown}\s*$", text, re.M), \
            f"spindle.conf(5) lacks '{key} = {value}'"
    sections = {s for s, _ in conf_keys(SERVER_CONF.read_text()).values()}
    for s in sections:
        assert re.search(rf"^\s+\[{s}\]\s*$", text, re.M), f"spindle.conf(5) lacks section [{s}]"


def test_man_page_follows_server_conf(man_pages, tmp_path):
    """Generated, not copied: a key added to server.conf shows up in the page."""
    conf = tmp_path / "server.conf"
    conf.write_text(SERVER_CONF.read_text().replace(
        "[log]\n", "[log]\n# A key only this test knows.\nzz_test_key = 42\n\n", 1))
    out = subprocess.run(["awk", "-f", str(util.REPO_ROOT / "scripts/conf-keys.awk"), str(conf)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "*zz\\_test\\_key* = _42_\n\tA key only this test knows." in out.stdout


def test_spindle_8_covers_options_models_and_signals(man_pages):
    text = render(man_pages["spindle.8"])
    for section in ("SYNOPSIS", "OPTIONS", "MODELS", "SIGNALS", "EXIT STATUS", "FILES", "EXAMPLES"):
        assert re.search(rf"^{section}$", text, re.M), f"spindle(8) has no {section} section"
    helptext = util.run_spindle("--help").stdout
    for opt in re.findall(r"--[a-z-]+", helptext):
        assert opt in text, f"spindle(8) does not document {opt} (spindle --help lists it)"
    for model in util.list_models():
        assert re.search(rf"^\s+{model}$", text, re.M), f"spindle(8) does not describe the {model} model"
    for sig in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1"):
        assert sig in text


@pytest.mark.parametrize("page", PAGES)
def test_man_pages_render_without_groff_warnings(man_pages, page):
    r = subprocess.run(["groff", "-ww", "-man", "-z", str(man_pages[page])], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_no_section_of_spindle_conf_5_is_empty(man_pages):
    """Every [section] of the key reference has something under it: a
    section whose comments have no key line after them ([cache_control])
    still shows them."""
    text = render(man_pages["spindle.conf.5"])
    body = text[text.index("\nKEYS\n"):text.index("\nRELOADING\n")]
    parts = re.split(r"^\s+(\[[a-z_]+\])\s*$", body, flags=re.M)
    for name, content in zip(parts[1::2], parts[2::2]):
        assert content.strip(), f"spindle.conf(5): {name} is empty"
    rules = parts[parts.index("[cache_control]") + 1]
    assert "first match wins" in rules and re.search(r"^\s+/assets/\* = public, max-age=31536000, immutable$",
                                                     rules, re.M), rules


def test_spindle_conf_5_keeps_examples_and_backslashes(man_pages):
    """server.conf's indented examples stay one per line, and `\\ufffd`
    keeps its backslash (scdoc eats a single one)."""
    text = render(man_pages["spindle.conf.5"], width=80)
    for line in ("listen = 127.0.0.1:8080", "listen = [::1]:8080",
                 "listen = unix:/run/spindle/spindle.sock mode=0660 group=www-data"):
        assert re.search(rf"^\s+{re.escape(line)}$", text, re.M), f"spindle.conf(5) merges '{line}' into prose"
    assert "\\ufffd" in text


@pytest.mark.parametrize("page", PAGES)
def test_man_pages_name_no_internal_issue_or_seed(man_pages, page):
    """A reader of an installed page has neither the issue tracker nor the
    lab's seeds: no "issue 13" or "Seed 002" in it."""
    text = render(man_pages[page])
    found = re.findall(r"\b(?:issues?|seeds?)\s+#?\d+", text, re.I)
    assert not found, f"{page} mentions {found}"


@pytest.mark.parametrize("page", ["spindle.8", "spindle.conf.5"])
def test_man_pages_say_only_what_a_reload_cannot_change(man_pages, page):
    """A reload moves bind and port (test_listen.py: test_reload_moves_the_port);
    what a page says needs a restart is reuseport and a kept address's options,
    never bind or port."""
    r = subprocess.run(["man", "--nh", "-l", str(man_pages[page])], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, MANWIDTH="1000"))
    text = " ".join(re.sub(".\b", "", r.stdout).split())
    claims = [s for s in re.split(r"(?<=[.;:])\s", text) if "restart" in s and "need" in s]
    assert claims, f"{page} no longer says what needs a restart"
    for sentence in claims:
        assert not re.search(r"\b(bind|port)\b", sentence), f"{page}: {sentence}"


def test_spindle_stat_1_documents_every_option(man_pages):
    text = render(man_pages["spindle-stat.1"])
    for section in ("SYNOPSIS", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert re.search(rf"^{section}$", text, re.M), f"spindle-stat(1) has no {section} section"
    r = subprocess.run([str(util.REPO_ROOT / "spindle-stat"), "--help"], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stderr
    options = re.findall(r"^\s+(-\w), (--[a-z-]+)", r.stdout, re.M)
    assert len(options) >= 6, r.stdout
    for short, long in options:
        assert re.search(rf"^\s+{short}, {long}\b", text, re.M), f"spindle-stat(1) does not document {long}"
