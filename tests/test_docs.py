"""The documentation stays a map of the code: the README fits on a page, every relative link lands on a
file (and heading) that exists, and every CUWIRE_* variable the code reads is in docs/settings.md."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from cuwire.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SETTINGS_DOC = ROOT / "docs" / "settings.md"
DOCS = [README, ROOT / "docker" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200

NAME = re.compile(r"CUWIRE_[A-Z_]+")
# a name the C preprocessor defines or tests (include guards, CUWIRE_READY()) or the compiler is given
# (-DCUWIRE_PYTHON_VERSION, by client/build.py) is a macro, not a variable
MACRO = re.compile(r"^\s*#\s*(?:define|ifdef|ifndef|undef)\s+(CUWIRE_[A-Z_]+)|defined\s*\(\s*(CUWIRE_[A-Z_]+)\s*\)",
                   re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    text = FENCE.sub("", path.read_text())
    out = set()
    for title in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text()))
            if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: ...


def test_readme_fits_on_a_page():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; at most {README_MAX_LINES} (move text to docs/)"


def test_relative_links_point_to_files():
    broken = []
    for doc in DOCS:
        for target in relative_links(doc):
            file = target.split("#", 1)[0]
            if file and not (doc.parent / file).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_relative_links_point_to_headings():
    broken = []
    for doc in DOCS:
        for target in relative_links(doc):
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file) if file else doc
            if anchor and dest.suffix == ".md" and dest.exists() and anchor not in anchors(dest):
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)


def code_variables() -> set[str]:
    """Every CUWIRE_* name in cuwire/'s own source (generated code aside) that is not a C macro, and the
    variable of every field of Settings (settings.py spells those as CUWIRE_{name.upper()})."""
    names, macros = set(), set()
    for path in (ROOT / "cuwire").rglob("*"):
        if path.suffix not in (".py", ".c", ".h") or "generated" in path.relative_to(ROOT / "cuwire").parts:
            continue
        text = path.read_text(errors="replace")
        names |= set(NAME.findall(text))
        if path.suffix in (".c", ".h"):
            macros |= {a or b for a, b in MACRO.findall(text)}
        macros |= set(re.findall(r"-D(CUWIRE_[A-Z_]+)=", text))
    names |= {f"CUWIRE_{f.name.upper()}" for f in dataclasses.fields(Settings) if f.name != "errors"}  # (no setting)
    return names - macros


def documented(name: str, text: str) -> bool:
    return re.search(rf"{name}(?![A-Z_])", text) is not None


def test_settings_cover_settings_py():
    assert "CUWIRE_SERVER" in code_variables() and "CUWIRE_SPIN_US" in code_variables()  # (the scan works)


def test_every_variable_is_documented():
    text = SETTINGS_DOC.read_text()
    missing = sorted(n for n in code_variables() if not documented(n, text))
    assert not missing, f"CUWIRE_* variables the code reads but docs/settings.md does not name: {missing}"


def test_documented_variables_exist():
    """No ghost: every CUWIRE_* name docs/settings.md gives is read somewhere (cuwire/, emulator/, tests/,
    bench/, the Makefile)."""
    source = ""
    for folder in ("cuwire", "emulator", "tests", "bench"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".c", ".h", ".sh", ".cu") and path.name != "test_docs.py":
                source += path.read_text(errors="replace")
    source += (ROOT / "Makefile").read_text()
    known = set(NAME.findall(source)) | code_variables()
    ghosts = sorted(set(NAME.findall(SETTINGS_DOC.read_text())) - known)
    assert not ghosts, f"docs/settings.md names CUWIRE_* variables nothing reads: {ghosts}"
