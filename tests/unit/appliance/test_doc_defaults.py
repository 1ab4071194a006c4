"""A default the README or ARCHITECTURE states is the code's default (#50): the README's table of
keys, and every "`key` N" or "`key`, N" in either document for a key of ``appliance/config.py``."""
import os
import re

from rocketbox.appliance import config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULTS = {name: default for name, _parse, default, _meaning in config.TABLE
            if isinstance(default, str) and default.lstrip("-").isdigit()}


def _stated(path: str) -> list[tuple[str, str, int]]:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    out = []
    for m in re.finditer(r"\| `(\w+)` \| ([\d,]+) \|", text):                       # the README's table rows
        out.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1))
    for m in re.finditer(r"`(\w+)`,? ([\d,]{2,})\b", text):                        # "`key` 131,072" in prose
        out.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1))
    return [(k, v, n) for k, v, n in out if k in DEFAULTS]


def test_documented_defaults_are_the_codes():
    wrong, checked = [], 0
    for path in ("README.md", os.path.join("docs", "ARCHITECTURE.md")):
        for key, value, line in _stated(path):
            checked += 1
            if int(value.replace(",", "")) != int(DEFAULTS[key]):
                wrong.append(f"{path}:{line}: {key} {value}, but the code's default is {DEFAULTS[key]}")
    assert not wrong, wrong
    assert checked >= 6


def test_architecture_stays_a_design():
    """At most 600 lines, present tense: run figures live in PERFORMANCE.md, history in CHANGELOG.md
    and docs/decisions/ (a design parameter such as "every 200 ms" is not a run figure)."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) <= 600
    history = re.findall(r"used to|no longer|until this|\bfell\b|(?:was|were) tried|measured|before this", text, re.I)
    figures = re.findall(r"\d[\d.,]*\s*(?:µs|instructions|msgs/s|% of a core)|\bk instructions", text)
    assert history == [] and figures == [], (history, figures)


def test_readme_layout_lists_every_top_level_folder():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    layout = text[text.index("## Layout"):text.index("\n## ", text.index("## Layout") + 1)]
    folders = {e.name for e in os.scandir(ROOT) if e.is_dir() and not e.name.startswith((".venv", "__", ".git", "."))
               and not e.name.endswith(".egg-info") and e.name not in ("build", "data", "node_modules")}
    missing = sorted(f for f in folders | {".ci"} if f"`{f}/`" not in layout)
    assert missing == [] and len(folders) >= 18
