"""Convert the UD treebanks (and Tweebank v2) of the mirror to corpus/: check, spaCy's converter, UPOS targets.

    python -m projects.paper.scripts.convert_ud --mirror ../shared/data [--datasets en,fr,...] [--tweebank-v2]

Each file goes through :func:`spacy_nldm.corpora.ud.convert_conllu` (the same code as
``python -m spacy_nldm convert ud``): validated and counted, converted by spaCy's conllu converter (one
sentence per Doc, multiword tokens split into their syntactic words, UPOS on Token.pos_), UPOS copied onto
Token.tag_ (the label spaCy's tagger predicts), gold heads stored, counts checked against the source.
Polish train is the upstream DocBin, checked against the UD counts (``targets_from_docbin``).
A dataset whose train file is not in the mirror (It, Ru) gets dev/test only, with a note.
Exits non-zero, naming file, line and problem, on malformed input.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

from projects.paper.registry import DATASETS, POLISH_TRAIN_COUNTS, POLISH_TRAIN_DOCBIN, UD_KEYS, parse_list, ud_file

from spacy_nldm.corpora.docbins import summary, write_docbin
from spacy_nldm.corpora.errors import ConversionError, ConversionWarning
from spacy_nldm.corpora.ud import convert_conllu, targets_from_docbin


def convert(out: Path, source: Path, step, *args) -> None:
    """Run one conversion step, write its Docs to ``out`` and print the counts; errors end the script."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConversionWarning)
        try:
            docs, n_sents, n_toks = step(*args)
        except ConversionError as err:
            sys.exit(f"error: {err}")
        finally:
            for warning in caught:
                print(f"warning: {warning.message}", file=sys.stderr, flush=True)
    write_docbin(docs, out)
    print("\n".join(summary([(str(source), n_sents, n_toks)], out)), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mirror", type=Path, required=True, help="the data folder (project.yml: vars.mirror)")
    p.add_argument("--out", type=Path, default=Path("corpus"))
    p.add_argument("--datasets", default="all", help="comma-separated UD keys: " + ",".join(UD_KEYS))
    p.add_argument("--tweebank-v2", action="store_true", help="also convert Tweebank v2 (UD trees of tweets)")
    args = p.parse_args()
    for key in parse_list(args.datasets, UD_KEYS):
        print(f"== {key} ({DATASETS[key]['folder']})", flush=True)
        for split in ("train", "dev", "test"):
            out = args.out / "ud" / key / f"{split}.spacy"
            src = ud_file(args.mirror, key, split)
            if key == "pl" and split == "train":
                docbin = args.mirror / POLISH_TRAIN_DOCBIN
                convert(out, docbin, targets_from_docbin, docbin, None, *POLISH_TRAIN_COUNTS)
            elif src.exists():
                convert(out, src, convert_conllu, src)
            elif split == "train":
                print(f"note: {src} is not in the mirror (see {src.parent}/MISSING_TRAIN.md): "
                      f"{key} has dev/test only and is not trained", flush=True)
            else:
                sys.exit(f"error: {src}: file not found")
    if args.tweebank_v2:
        print("== tweebank_v2", flush=True)
        for split in ("train", "dev", "test"):
            src = args.mirror / "tweebank_v2" / f"en-ud-tweet-{split}.conllu"
            convert(args.out / "tweebank_v2" / f"{split}.spacy", src, convert_conllu, src)


if __name__ == "__main__":
    main()
