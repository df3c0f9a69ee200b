"""Keep the README's copies of result tables in step with the files they come from.

A copied table sits between two markers in README.md::

    <!-- table: results/accuracy.md -->
    | ... |
    <!-- /table -->

and is the Markdown table (every line starting with ``|``) of that file, in order. ``python
scripts/readme_tables.py`` rewrites every marked block from its file; ``--check`` only reports the
blocks that differ (exit status 1), as ``tests/test_readme.py`` does.
"""
import re
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- table: (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def table_lines(path: Path) -> str:
    """The table lines of a Markdown file, joined with newlines (and a final one)."""
    lines = [line for line in path.read_text(encoding="utf8").splitlines() if line.startswith("|")]
    return "\n".join(lines) + "\n"


def block_body(source: str) -> str:
    """What belongs between the markers: the source's table, a blank line either side."""
    return "\n" + table_lines(ROOT / source) + "\n"


def blocks(readme: str) -> List[Tuple[str, str, str]]:
    """(source path, README copy, what the copy should be) for every marked block."""
    return [(m["path"], m["body"], block_body(m["path"])) for m in BLOCK.finditer(readme)]


def sync(readme: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + block_body(m["path"]) + m.group(4), readme)


def main(argv: List[str]) -> int:
    path = ROOT / "README.md"
    text = path.read_text(encoding="utf8")
    stale = [source for source, copy, table in blocks(text) if copy != table]
    if "--check" in argv:
        for source in stale:
            print(f"README.md: the copy of {source} is out of step (python scripts/readme_tables.py)")
        return 1 if stale else 0
    path.write_text(sync(text), encoding="utf8")
    print(f"README.md: {len(stale)} table(s) rewritten: {', '.join(stale) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
