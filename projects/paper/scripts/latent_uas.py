"""How close are the NLDM's latent trees to Tweebank's gold dependency trees? (The paper's section 7, 17.9% UAS.)

    python -m projects.paper.scripts.latent_uas --model training/twitter/nldm/model-best \\
        --test ../shared/data/tweebank_v1/test --output projects/paper/results/latent_uas.md --json projects/paper/results/latent_uas.json

The trained NLDM pipeline (ARK Twitter tags) tags every tweet of the Tweebank v1 test file (Kong et al. 2014)
on its gold tokens (a Doc made from the file's words), and its latent tree (``Token._.nldm_head``: the head's
index in the doc, None = attached to the root) is scored against the gold HEAD column: unlabeled attachment
score (UAS), the share of tokens whose head is right, a root attachment counting as a head.

Tweebank v1 leaves some tokens out of its trees (hashtags, URLs, emoticons, most punctuation): their HEAD is
negative (-3 in this file; the upstream README says -1), and no gold arc points at them. As in TweeboParser's
own evaluation, only the tokens in the tree are scored; the left-out tokens are still tagged (the NLDM's tree
spans every token of the tweet), and an NLDM arc from a scored token to a left-out one counts as wrong. One
more row follows such an arc through the left-out tokens up to the first ancestor in the tree (or the root),
the NLDM tree restricted to the gold tree's tokens.

The pipeline is tagged twice: with its own decoder (``posterior``, the package's default: the labels are the
arg-max of the label marginals, the tree the best one for those labels) and with ``viterbi`` (the joint arg-max
over labels and tree, the paper's z* = argmax_z max_y s(x, y, z)); a load-time setting, no retraining.

Baselines: the chains "head = previous token" (the first token attached to the root) and "head = next token"
(the last one to the root), over all tokens of the tweet, as the NLDM's trees are, and over the tokens in the
gold tree only. The tweets of the test file that are also in the NLDM's training corpus (``--train-corpus``,
the ARK Twitter tweets tagged by hand; Tweebank drew its tweets from them) are counted apart. A second table
describes the trees' shape (arc lengths, directions, root attachments), the NLDM's next to the gold ones.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

PAPER_UAS = 17.9  # the paper, section 7 "Comparison with Gold Trees"
DECODERS = ("posterior", "viterbi")
NLDM_FACTORY = "nldm_tagger"

# ------------------------------------------------------------------ trees: 1-based heads, 0 = root, < 0 = left out


def in_tree(gold: Sequence[int]) -> List[bool]:
    """Which tokens the gold tree holds (HEAD >= 0); Tweebank v1 marks the left-out ones with -1 or -3."""
    return [h >= 0 for h in gold]


def heads_from_nldm(heads: Sequence[Optional[int]]) -> List[int]:
    """``Token._.nldm_head`` values (0-based doc index, None = root) as 1-based heads with 0 = root."""
    return [0 if h is None else int(h) + 1 for h in heads]


def chain_heads(n: int, direction: str = "previous") -> List[int]:
    """The chain over n tokens: head = the previous token (the first one on the root) or the next one (the last
    one on the root); 1-based heads, 0 = root."""
    if direction == "previous":
        return [i for i in range(n)]  # token i (0-based) -> token i - 1, i.e. 1-based index i; token 0 -> root
    if direction == "next":
        return [i + 2 if i < n - 1 else 0 for i in range(n)]
    raise ValueError(f"direction must be 'previous' or 'next', not {direction!r}")


def tree_chain_heads(gold: Sequence[int], direction: str = "previous") -> List[int]:
    """The chain over the gold tree's tokens only (the left-out ones skipped; they get -1)."""
    kept = [i for i, ok in enumerate(in_tree(gold)) if ok]
    heads = [-1] * len(gold)
    for j, i in enumerate(kept):
        if direction == "previous":
            heads[i] = kept[j - 1] + 1 if j > 0 else 0
        elif direction == "next":
            heads[i] = kept[j + 1] + 1 if j + 1 < len(kept) else 0
        else:
            raise ValueError(f"direction must be 'previous' or 'next', not {direction!r}")
    return heads


def collapse_left_out(pred: Sequence[int], gold: Sequence[int]) -> List[int]:
    """The predicted tree restricted to the gold tree's tokens: an arc to a left-out token is followed up
    through its heads to the first token in the tree, or the root. ValueError on a cycle."""
    keep = in_tree(gold)
    out = list(pred)
    for i, head in enumerate(pred):
        seen = {i}
        while head > 0 and not keep[head - 1]:
            if head - 1 in seen:
                raise ValueError(f"the predicted heads {list(pred)} have a cycle through token {head}")
            seen.add(head - 1)
            head = pred[head - 1]
        out[i] = head
    return out


def attachment(pred: Sequence[int], gold: Sequence[int]) -> Tuple[int, int]:
    """(tokens with the gold head, tokens scored): only the tokens in the gold tree (HEAD >= 0) are scored."""
    if len(pred) != len(gold):
        raise ValueError(f"{len(pred)} predicted heads for {len(gold)} gold heads")
    scored = [(p, g) for p, g in zip(pred, gold) if g >= 0]
    return sum(p == g for p, g in scored), len(scored)


def uas(pairs: Iterable[Tuple[Sequence[int], Sequence[int]]]) -> Tuple[float, int, int]:
    """UAS in % over (predicted, gold) head lists, and the correct and scored token counts."""
    correct = total = 0
    for pred, gold in pairs:
        c, t = attachment(pred, gold)
        correct += c
        total += t
    return (100.0 * correct / total if total else float("nan")), correct, total


def shape(trees: Iterable[Tuple[Sequence[int], Sequence[bool]]], max_dist: Optional[int] = None) -> Dict[str, float]:
    """Shape of trees over the tokens marked True: the share (%) of root attachments, and of the other arcs
    those of length 1, with the head first (before the dependent), of length <= max_dist; their mean
    length. Arcs are counted from the tokens marked True whatever their head."""
    roots = arcs = length1 = left = within = 0
    lengths = 0
    for heads, mask in trees:
        for i, (h, keep) in enumerate(zip(heads, mask)):
            if not keep:
                continue
            if h == 0:
                roots += 1
                continue
            d = abs(h - 1 - i)
            arcs += 1
            lengths += d
            length1 += d == 1
            left += h - 1 < i
            within += max_dist is not None and d <= max_dist
    tokens = roots + arcs
    pct = (lambda a, b: 100.0 * a / b if b else float("nan"))
    out = {"tokens": tokens, "root %": pct(roots, tokens), "arcs of length 1 %": pct(length1, arcs),
           "arcs with the head first %": pct(left, arcs), "mean arc length": lengths / arcs if arcs else float("nan")}
    if max_dist is not None:
        out[f"arcs of length <= {max_dist} %"] = pct(within, arcs)
    return out


# ------------------------------------------------------------------ the pipeline


def nldm_components(model: Path) -> List[str]:
    """The names of the pipeline's nldm_tagger components, read from its config.cfg; ValueError if none."""
    import spacy

    from projects.paper.registry import components_made_by

    names = components_made_by(spacy.util.load_config(model / "config.cfg"), (NLDM_FACTORY,))
    if not names:
        raise ValueError(f"{model}: the pipeline has no {NLDM_FACTORY} component, so no latent tree to score")
    return names


def load_nldm(model: Path, decode: str):
    """The pipeline with its nldm_tagger components decoding by ``decode`` and keeping their trees."""
    import spacy

    overrides = {name: {"decode": decode, "store_tree": True} for name in nldm_components(model)}
    return spacy.load(model, config={"components": overrides})


def decode_tweets(model: Path, tweets, decode: str, canonical: bool = True) -> Tuple[List[List[int]], List[List[str]]]:
    """Per tweet, the latent tree (1-based heads, 0 = root) and the tags, from the tweet's gold tokens.
    ``canonical=False``: among equally scored trees, Viterbi's own choice instead of the package's shortest-arc
    one (``LatentTree.canonical``; a diagnostic: the paper's code had no such rule)."""
    from spacy.tokens import Doc

    import spacy_nldm.pipeline.tagger as tagger_module

    nlp = load_nldm(model, decode)
    docs = (Doc(nlp.vocab, words=t.words) for t in tweets)
    heads, tags = [], []
    original = tagger_module.get_structure

    def structure(m, tables):
        found = original(m, tables)
        found.canonical = canonical
        return found

    tagger_module.get_structure = structure
    try:
        for doc in nlp.pipe(docs):
            heads.append(heads_from_nldm([t._.nldm_head for t in doc]))
            tags.append([t.tag_ for t in doc])
    finally:
        tagger_module.get_structure = original
    return heads, tags


def training_tweets(path: Optional[Path]) -> Optional[set]:
    """The word sequences of the NLDM's training corpus (a DocBin), or None without one."""
    if path is None or not path.exists():
        return None
    from spacy.tokens import DocBin
    from spacy.vocab import Vocab

    return {tuple(t.text for t in doc) for doc in DocBin().from_disk(path).get_docs(Vocab())}


def model_settings(model: Path) -> Dict[str, object]:
    import spacy

    config = spacy.util.load_config(model / "config.cfg")
    name = nldm_components(model)[0]
    component = config["components"][name]
    settings = {"component": name, "decode (as trained)": component.get("decode"),
                "max_dist": component["model"].get("max_dist"),
                "edge_scorer": component["model"].get("edge_scorer"),
                "distance_bias": component["model"].get("distance_bias"),
                "head dropout": component["model"].get("dropout"),
                "seed": config.get("system", {}).get("seed"), "max_steps": config["training"].get("max_steps")}
    meta = model / "meta.json"
    if meta.exists():
        settings["dev tag_acc (meta.json)"] = json.loads(meta.read_text()).get("performance", {}).get("tag_acc")
    record = model.parent / "time.json"  # the main job's train step records its command there
    if record.exists():
        settings["trained by"] = "python " + " ".join(shlex.quote(a) for a in json.loads(record.read_text())["command"][1:])
    return settings


# ------------------------------------------------------------------ report


def evaluate(model: Path, test: Path, train_corpus: Optional[Path]) -> Dict[str, object]:
    from spacy_nldm.corpora.tweebank import read_tweebank_v1

    tweets = list(read_tweebank_v1(test))
    golds = [t.heads for t in tweets]
    seen = training_tweets(train_corpus)
    subsets = {"all": list(range(len(tweets)))}
    if seen is not None:
        subsets["in the NLDM's training tweets"] = [i for i, t in enumerate(tweets) if tuple(t.words) in seen]
        subsets["not in them"] = [i for i, t in enumerate(tweets) if tuple(t.words) not in seen]
    systems: Dict[str, List[List[int]]] = {}
    tag_acc: Dict[str, Dict[str, float]] = {}
    for decode in DECODERS:
        heads, tags = decode_tweets(model, tweets, decode)
        systems[f"NLDM latent tree ({decode})"] = heads
        right = [sum(p == g for p, g in zip(ts, t.tags)) for t, ts in zip(tweets, tags)]
        tag_acc[decode] = {s: round(100.0 * sum(right[i] for i in idx) / sum(len(tweets[i].words) for i in idx), 2)
                           for s, idx in subsets.items()}
        if decode == "posterior":
            systems["NLDM latent tree (posterior), arcs through left-out tokens followed into the tree"] = [
                collapse_left_out(p, g) for p, g in zip(heads, golds)]
    for direction in ("previous", "next"):
        systems[f"head = {direction} token"] = [chain_heads(len(g), direction) for g in golds]
        systems[f"head = {direction} token in the gold tree"] = [tree_chain_heads(g, direction) for g in golds]
    scores = {name: {subset: uas(zip([heads[i] for i in idx], [golds[i] for i in idx]))
                     for subset, idx in subsets.items()} for name, heads in systems.items()}
    settings = model_settings(model)
    k = settings.get("max_dist")
    posterior = systems["NLDM latent tree (posterior)"]
    shapes = {
        "NLDM (posterior), all tokens": shape(((p, [True] * len(p)) for p in posterior), k),
        "NLDM (posterior), tokens in the gold tree": shape(((p, in_tree(g)) for p, g in zip(posterior, golds)), k),
        "gold, tokens in the gold tree": shape(((g, in_tree(g)) for g in golds), k),
    }
    # every token scored (a chain has no negative head): how chain-like the NLDM's tree is
    agreement = {direction: round(uas((p, chain_heads(len(p), direction)) for p in posterior)[0], 2)
                 for direction in ("previous", "next")}
    # two readings of the paper's figure: every token scored (an arc of a left-out token is wrong, as is a
    # root attachment of one: their gold head is negative), and Viterbi's own choice among equal trees
    every_token = {name: round(100.0 * uas(zip(systems[name], golds))[1] / sum(len(g) for g in golds), 2)
                   for name in ("NLDM latent tree (posterior)", "head = previous token", "head = next token")}
    own_choice = {decode: round(uas(zip(decode_tweets(model, tweets, decode, canonical=False)[0], golds))[0], 2)
                  for decode in DECODERS}
    return {
        "model": str(model), "test": str(test), "train_corpus": str(train_corpus) if seen is not None else None,
        "settings": settings,
        "tweets": {s: len(idx) for s, idx in subsets.items()},
        "tokens": {s: sum(len(tweets[i].words) for i in idx) for s, idx in subsets.items()},
        "scored": {s: sum(h >= 0 for i in idx for h in golds[i]) for s, idx in subsets.items()},
        "uas": {name: {s: round(v[0], 2) for s, v in by.items()} for name, by in scores.items()},
        "tag_acc": tag_acc,
        "shape": {name: {key: round(v, 2) for key, v in s.items()} for name, s in shapes.items()},
        "nldm_posterior_agrees_with_chain": agreement,
        "uas_every_token_scored": every_token,
        "uas_viterbi_own_tie_choice": own_choice,
        "paper_uas": PAPER_UAS,
    }


def markdown(result: Dict[str, object], command: str) -> str:
    subsets = list(result["tweets"])
    head = "| Trees | " + " | ".join(
        f"{s}: {result['tweets'][s]} tweets, {result['scored'][s]} of {result['tokens'][s]} tokens scored"
        for s in subsets) + " |"
    lines = ["# Latent trees against Tweebank v1's gold trees (UAS, %)", "",
             f"Command: `{command}`", "",
             f"Model: `{result['model']}`. " + "; ".join(f"{k}: `{v}`" for k, v in result["settings"].items()) + ".",
             "", f"Test: `{result['test']}` (Tweebank v1 test, Kong et al. 2014). Only the tokens in the gold tree "
             "(HEAD >= 0) are scored; the left-out ones (HEAD -3: hashtags, URLs, emoticons, most punctuation) are "
             "tagged but not scored, and an arc to one of them counts as wrong. Tweets counted apart: "
             f"those whose words are a tweet of `{result['train_corpus']}`.", "",
             head, "|---|" + "---:|" * len(subsets)]
    for name, by in result["uas"].items():
        lines.append(f"| {name} | " + " | ".join(f"{by[s]:.1f}" for s in subsets) + " |")
    lines.append(f"| the paper's NLDM (section 7) | {result['paper_uas']:.1f} |" + " |" * (len(subsets) - 1))
    lines.append("| tag accuracy of the NLDM runs on the file's ARK tags, all tokens (posterior / viterbi) | " + " | ".join(
        f"{result['tag_acc']['posterior'][s]:.1f} / {result['tag_acc']['viterbi'][s]:.1f}" for s in subsets) + " |")
    agree, every, own = (result["nldm_posterior_agrees_with_chain"], result["uas_every_token_scored"],
                         result["uas_viterbi_own_tie_choice"])
    lines += ["", f"Over all {result['tokens']['all']} tokens, the NLDM's posterior tree agrees with the "
              f"previous-token chain on {agree['previous']:.1f}% of the heads and with the next-token chain on "
              f"{agree['next']:.1f}%. Scoring every token instead (a left-out token's head is then always "
              "wrong): " + ", ".join(f"{name} {v:.1f}" for name, v in every.items()) + ". With Viterbi's own "
              "choice among equally scored trees instead of the shortest-arc one: " + ", ".join(
                  f"{d} {v:.1f}" for d, v in own.items()) + ".", ""]
    keys = list(next(iter(result["shape"].values())))
    lines += ["| Tree shape | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for name, s in result["shape"].items():
        lines.append(f"| {name} | " + " | ".join(f"{s[k]:.0f}" if k == "tokens" else f"{s[k]:.1f}" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("training/twitter/nldm/model-best"),
                        help="a trained pipeline with an nldm_tagger on ARK tags")
    parser.add_argument("--test", type=Path, default=Path("../shared/data/tweebank_v1/test"),
                        help="Tweebank v1 file with gold heads (14 columns)")
    parser.add_argument("--train-corpus", type=Path, default=Path("corpus/twitter/train.spacy"),
                        help="the NLDM's training DocBin: its tweets are counted apart (skipped if missing)")
    parser.add_argument("--output", type=Path, default=None, help="Markdown table (e.g. projects/paper/results/latent_uas.md)")
    parser.add_argument("--json", type=Path, default=None, help="the figures as JSON")
    args = parser.parse_args(argv)
    for path, what in ((args.test, "Tweebank v1 test file"), (args.model, "trained pipeline"),
                       (args.model / "config.cfg", "pipeline's config.cfg")):
        if not path.exists():
            parser.error(f"{what} {path} does not exist")
    try:
        nldm_components(args.model)
    except ValueError as error:
        parser.error(str(error))
    command = "python -m projects.paper.scripts.latent_uas " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    result = evaluate(args.model, args.test, args.train_corpus)
    text = markdown(result, command)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf8")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": command, **result}, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
