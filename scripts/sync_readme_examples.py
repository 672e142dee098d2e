"""Keep the code shown in README.md and the documentation pages identical to the scripts in examples/.

In README.md and docs/*.md, a line ``<!-- example: examples/NAME.py -->`` is followed by a fenced
``python`` block that shows that file without its module docstring. ``python
scripts/sync_readme_examples.py`` rewrites those blocks from the files; ``--check`` only reports
(exit 1) when they differ. tests/test_examples.py runs the check (and that every Python block of
those pages is such a block), so no page can drift from code that is executed. The Japanese guide
README.ja.md is kept the same way (its own scripts are in examples/ja/; tests/test_readme_ja.py
checks it).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
READMES = (README, ROOT / "README.ja.md")
MARKER = re.compile(r"^<!-- example: (?P<path>[^ ]+) -->\n```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    """Every page that shows examples: the README and the documentation site's pages."""
    return [*READMES, *sorted((ROOT / "docs").glob("*.md"))]


def shown_code(path: Path) -> str:
    """The file as a page shows it: everything after the module docstring, leading blank lines dropped."""
    source = path.read_text(encoding="utf-8")
    module = ast.parse(source)
    body = source
    if module.body and isinstance(module.body[0], ast.Expr) and isinstance(module.body[0].value, ast.Constant) \
            and isinstance(module.body[0].value.value, str):
        end = module.body[0].end_lineno or 0
        body = "\n".join(source.splitlines()[end:]) + "\n"
    return body.lstrip("\n")


def readme_examples(text: str) -> list[tuple[str, str]]:
    """(path, code shown) for every marked block of a page."""
    return [(m.group("path"), m.group("code")) for m in MARKER.finditer(text)]


def synced(text: str) -> str:
    return MARKER.sub(lambda m: f"<!-- example: {m.group('path')} -->\n```python\n"
                                f"{shown_code(ROOT / m.group('path'))}```", text)


def main(argv: list[str]) -> int:
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        fresh = synced(text)
        if fresh != text:
            stale.append(str(page.relative_to(ROOT)))
            if "--check" not in argv:
                page.write_text(fresh, encoding="utf-8")
    if stale and "--check" in argv:
        print(f"code blocks differ from examples/ in {', '.join(stale)}: run python scripts/sync_readme_examples.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
