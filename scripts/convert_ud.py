"""Convert the UD treebanks (and Tweebank v2) of the mirror to corpus/: check, `spacy convert`, UPOS targets.

    python scripts/convert_ud.py --mirror ../shared/data [--datasets en,fr,...] [--tweebank-v2]

For each file: (1) ``spacy_nldm convert conllu-check`` (in-process) validates it and counts sentences and words;
(2) ``python -m spacy convert FILE --converter conllu --n-sents 1`` (one sentence per Doc, multiword tokens
split into their syntactic words, UPOS on Token.pos_); (3) ``spacy_nldm convert ud-targets`` (in-process) copies UPOS onto
Token.tag_ (the label spaCy's tagger predicts), stores the gold heads and checks the counts against (1).
A dataset whose train file is not in the mirror (It, Ru) gets dev/test only, with a note.
Exits non-zero, naming file, line and problem, on malformed input.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from datasets import DATASETS, POLISH_TRAIN_COUNTS, POLISH_TRAIN_DOCBIN, UD_KEYS, parse_list, ud_file

from spacy_nldm.cli.convert import conllu_check, ud_targets  # the CLI commands, called in-process


def run(command, *args, **kwargs) -> None:
    import typer

    try:
        command(*args, **kwargs)
    except typer.Exit as err:  # the command has printed "error: FILE:LINE: problem"
        sys.exit(err.exit_code)


def convert_conllu(src: Path, out: Path, tmp: Path) -> None:
    run(conllu_check, [src])
    proc = subprocess.run(
        [sys.executable, "-m", "spacy", "convert", str(src), str(tmp), "--converter", "conllu",
         "--n-sents", "1", "--file-type", "spacy"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"error: spacy convert failed on {src}")
    raw = tmp / (src.stem + ".spacy")
    run(ud_targets, raw, output=out, conllu=src, expect_sentences=None, expect_tokens=None)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mirror", type=Path, default=Path("../shared/data"))
    p.add_argument("--out", type=Path, default=Path("corpus"))
    p.add_argument("--datasets", default="all", help="comma-separated UD keys: " + ",".join(UD_KEYS))
    p.add_argument("--tweebank-v2", action="store_true", help="also convert Tweebank v2 (UD trees of tweets)")
    args = p.parse_args()
    keys = parse_list(args.datasets, UD_KEYS)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for key in keys:
            print(f"== {key} ({DATASETS[key]['folder']})", flush=True)
            for split in ("train", "dev", "test"):
                out = args.out / "ud" / key / f"{split}.spacy"
                src = ud_file(args.mirror, key, split)
                if key == "pl" and split == "train":
                    run(ud_targets, args.mirror / POLISH_TRAIN_DOCBIN, output=out, conllu=None,
                        expect_sentences=POLISH_TRAIN_COUNTS[0], expect_tokens=POLISH_TRAIN_COUNTS[1])
                elif src.exists():
                    convert_conllu(src, out, tmp)
                elif split == "train":
                    print(f"note: {src} is not in the mirror (see {src.parent}/MISSING_TRAIN.md): "
                          f"{key} has dev/test only and is not trained", flush=True)
                else:
                    sys.exit(f"error: {src}: file not found")
        if args.tweebank_v2:
            print("== tweebank_v2", flush=True)
            for split in ("train", "dev", "test"):
                src = args.mirror / "tweebank_v2" / f"en-ud-tweet-{split}.conllu"
                convert_conllu(src, args.out / "tweebank_v2" / f"{split}.spacy", tmp)


if __name__ == "__main__":
    main()
