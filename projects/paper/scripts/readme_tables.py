"""Keep the figures that README.md and docs/*.md copy from result files in step with those files.

Two kinds of marked block:

A copied table sits between two markers::

    <!-- table: projects/paper/results/accuracy.md -->
    | ... |
    <!-- /table -->

and is the Markdown table (every line starting with ``|``) of that file; a file with several tables gives
them all, in order, a blank line between two. ``python
projects/paper/scripts/readme_tables.py`` rewrites every such block from its file.

Prose or a hand-made summary table that quotes figures sits between::

    <!-- figures: projects/paper/results/table2.md projects/paper/results/glove.md -->
    ... NLDM 91.95 against CRF1 91.96 ...
    <!-- /figures -->

and every decimal number in it (``91.95``, ``+0.16``, ``−0.01``) must occur in one of the named files:
a signed number with the same sign, an unsigned one with any sign (the minus sign U+2212 reads as
``-``). These blocks are not rewritten; ``--check`` (and ``tests/test_readme.py``) report a figure that no
source holds.

``--check`` only reports (exit status 1 when something is out of step).
"""
import re
import sys
from pathlib import Path
from typing import List, Set, Tuple

ROOT = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"(<!-- table: (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)
FIGURES = re.compile(r"<!-- figures: (?P<paths>[^>]+?) -->\n(?P<body>.*?)<!-- /figures -->", re.S)
NUMBER = re.compile(r"(?<![\w.])(?P<sign>[+\-\u2212]?)(?P<digits>\d+\.\d+)(?![\w.]*\d)")


def documents() -> List[Path]:
    """The files whose marked blocks are kept in step: README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def table_lines(path: Path) -> str:
    """The table lines of a Markdown file, joined with newlines (and a final one); a file with several
    tables gives them in order, a blank line between two."""
    tables: List[List[str]] = [[]]
    for line in path.read_text(encoding="utf8").splitlines():
        if line.startswith("|"):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    return "\n\n".join("\n".join(lines) for lines in tables if lines) + "\n"


def block_body(source: str) -> str:
    """What belongs between the markers: the source's table, a blank line either side."""
    return "\n" + table_lines(ROOT / source) + "\n"


def blocks(text: str) -> List[Tuple[str, str, str]]:
    """(source path, copy, what the copy should be) for every marked table block of a document."""
    return [(m["path"], m["body"], block_body(m["path"])) for m in BLOCK.finditer(text)]


def numbers(text: str) -> List[Tuple[str, str]]:
    """(sign, digits) of every decimal number in ``text``; the sign is "", "+" or "-"."""
    return [(m["sign"].replace("\u2212", "-"), m["digits"]) for m in NUMBER.finditer(text)]


def figure_blocks(text: str) -> List[Tuple[List[str], List[str]]]:
    """(sources, figures that none of them holds) for every ``figures`` block of a document."""
    out = []
    for m in FIGURES.finditer(text):
        sources = m["paths"].split()
        signed: Set[Tuple[str, str]] = set()
        for source in sources:
            signed.update(numbers((ROOT / source).read_text(encoding="utf8")))
        unsigned = {digits for _, digits in signed}
        missing = [sign + digits for sign, digits in numbers(m["body"])
                   if ((sign, digits) not in signed if sign else digits not in unsigned)]
        out.append((sources, missing))
    return out


def sync(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + block_body(m["path"]) + m.group(4), text)


def main(argv: List[str]) -> int:
    bad = 0
    for path in documents():
        text = path.read_text(encoding="utf8")
        name = path.relative_to(ROOT)
        stale = [source for source, copy, table in blocks(text) if copy != table]
        for sources, missing in figure_blocks(text):
            if missing:
                bad += 1
                print(f"{name}: figures not in {' '.join(sources)}: {', '.join(missing)}")
        if "--check" in argv:
            for source in stale:
                print(f"{name}: the copy of {source} is out of step (python -m projects.paper.scripts.readme_tables)")
            bad += len(stale)
            continue
        if stale:
            path.write_text(sync(text), encoding="utf8")
            print(f"{name}: {len(stale)} table(s) rewritten: {', '.join(stale)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
