"""The study's one registry: its systems, its datasets (the paper's Table 1/2 and Tweebank v2), where they are
in the mirror (../shared/data) and in corpus/, and the paper's figures.

One key per dataset: ``twitter`` for ARK Twitter POS, the UD language code for a treebank, ``tb2`` for Tweebank
v2. ``tw`` is read as ``twitter`` (:func:`canonical`): the plain loop's records name Twitter ``tw`` in their
keys (:data:`RECORD_KEYS`), as does ``python -m spacy_nldm bench spacy-train``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

#: the study's own configs and results, relative to the repository root (where its commands run); the main
#: job's (the four systems' configs/, Table 2's results/) are the root's configs/ and results/
STUDY_CONFIGS = Path("projects/paper/configs")
STUDY_RESULTS = Path("projects/paper/results")

SYSTEMS = ["softmax", "crf1", "crf2", "nldm"]
SYSTEM_NAMES = {
    "softmax": "Neural Softmax",
    "crf1": "Neural 1-order CRF",
    "crf2": "Neural 2-order CRF",
    "nldm": "NLDM",
}
#: the systems' names in the seed-run tables (projects/paper/results/glove.md, minilm.md, the tuned tables)
SEED_TABLE_NAMES = {"softmax": "Neural softmax", "crf1": "Neural CRF, order 1", "crf2": "Neural CRF, order 2",
                    "nldm": "NLDM"}

# key: (paper column, spaCy language code for the blank pipeline, UD folder, file prefix, note)
# Maltese has no spaCy language class: "xx" (multi-language) only changes the NORM/shape lexical attributes.
DATASETS: Dict[str, dict] = {
    "twitter": dict(paper="Tw", lang="en", folder="twitter_pos", prefix=None),
    "en": dict(paper="En", lang="en", folder="UD_English-LinES", prefix="en_lines"),
    "fr": dict(paper="Fr", lang="fr", folder="UD_French-Spoken", prefix="fr_spoken"),
    "it": dict(paper="It", lang="it", folder="UD_Italian-PoSTWITA", prefix="it_postwita"),
    "te": dict(paper="Te", lang="te", folder="UD_Telugu-MTG", prefix="te_mtg"),
    "pl": dict(paper="Pl", lang="pl", folder="UD_Polish-LFG", prefix="pl_lfg"),
    "mt": dict(paper="Mt", lang="xx", folder="UD_Maltese-MUDT", prefix="mt_mudt"),
    "ru": dict(paper="Ru", lang="ru", folder="UD_Russian-GSD", prefix="ru_gsd"),
    "sv": dict(paper="Sv", lang="sv", folder="UD_Swedish-LinES", prefix="sv_lines"),
}
UD_KEYS = [k for k in DATASETS if k != "twitter"]
#: datasets beside Table 2's: Tweebank v2 (UPOS), in corpus/tweebank_v2 (the main job's convert-tweebank)
OTHER_DATASETS: Dict[str, dict] = {"tb2": dict(lang="en", corpus="tweebank_v2")}
#: the sets of the plain-loop comparison (``python -m projects.paper accuracy``), in its tables' order
LOOP_DATASETS = ["twitter", "en", "fr", "te", "pl", "mt", "sv", "tb2"]
#: spaCy language code of every dataset
LANGS: Dict[str, str] = {**{k: d["lang"] for k, d in DATASETS.items()}, **{k: d["lang"] for k, d in OTHER_DATASETS.items()}}
#: other names read as a dataset key
ALIASES = {"tw": "twitter"}
#: the name a dataset has in the plain loop's record keys, where it is not its key
RECORD_KEYS = {"twitter": "tw"}


def canonical(key: str) -> str:
    """A dataset's key (``tw`` -> ``twitter``; any other name unchanged)."""
    return ALIASES.get(key, key)


def corpus_folder(key: str) -> str:
    """A dataset's folder under corpus/: twitter, ud/<key>, tweebank_v2."""
    key = canonical(key)
    if key in OTHER_DATASETS:
        return OTHER_DATASETS[key]["corpus"]
    return "twitter" if key == "twitter" else f"ud/{key}"

# Polish train: the mirror has the upstream DocBin (made by `spacy convert` from the upstream CoNLL-U) and a
# CoNLL-U rebuilt from it; we take the DocBin and check it against the upstream stats.xml counts.
POLISH_TRAIN_DOCBIN = "ud/UD_Polish-LFG/pl_lfg-ud-train.spacy"
POLISH_TRAIN_COUNTS = (13774, 104750)

# The paper's Table 2 (POS accuracy, %).
PAPER_TABLE2: Dict[str, Dict[str, float]] = {
    "softmax": dict(twitter=88.73, en=90.22, fr=89.24, it=89.70, te=82.79, pl=89.02, mt=89.16, ru=82.78, sv=89.50),
    "crf1": dict(twitter=89.09, en=90.22, fr=89.24, it=89.71, te=83.36, pl=89.01, mt=88.89, ru=82.79, sv=89.39),
    "crf2": dict(twitter=89.29, en=90.18, fr=89.45, it=89.71, te=85.35, pl=89.22, mt=89.13, ru=82.95, sv=89.48),
    "nldm": dict(twitter=89.37, en=90.41, fr=89.64, it=90.58, te=86.45, pl=89.18, mt=89.11, ru=83.23, sv=89.77),
}
PAPER_AVG = dict(softmax=87.90, crf1=87.97, crf2=88.31, nldm=88.64)


def ud_file(mirror: Path, key: str, split: str) -> Path:
    d = DATASETS[key]
    return Path(mirror) / "ud" / d["folder"] / f"{d['prefix']}-ud-{split}.conllu"


def corpus_file(key: str, split: str, root: Path = Path("corpus")) -> Path:
    if key == "twitter":
        return root / "twitter" / f"{split}.spacy"
    return root / "ud" / key / f"{split}.spacy"


def has_train(mirror: Path, key: str) -> bool:
    if key == "twitter":
        return (Path(mirror) / "twitter_pos" / "oct27.train").exists()
    if key == "pl":
        return (Path(mirror) / POLISH_TRAIN_DOCBIN).exists()
    return ud_file(mirror, key, "train").exists()


def parse_list(text: Optional[str], allowed: List[str]) -> List[str]:
    if not text or text == "all":
        return list(allowed)
    if text == "none":
        return []
    items = [canonical(t.strip()) for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad:
        raise SystemExit(f"unknown: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def components_made_by(config, factories) -> List[str]:
    """Names of the components in a pipeline's config (``[components]``) made by one of ``factories``, in order."""
    return [name for name, block in config.get("components", {}).items() if block.get("factory") in factories]
