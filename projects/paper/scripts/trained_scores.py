"""Factored scores of trained taggers, and the structured loss replayed on them (BENCHMARKS.md, "trained scores").

``dump``: train ``nldm_tagger`` or ``crf_tagger`` with its factory defaults as
``projects.paper.runs.loop.train_and_score`` does (spacy.blank, add_pipe, nlp.initialize, nlp.update on
shuffled batches of 16 sentences, seed 0, one torch thread) and, after the given epochs (0 = just
initialized), save the model's forward output F (``SegmentScores``) of the first ``--batches`` training
batches of 16 sentences (file order), with lengths and gold label masks, to ``OUT/<factory>-e<epochs>.pt``.

``replay``: for each dumped file, the spread of the scores, the share of contractions and spans that the
tree's (or chain's) exp-space path sends to the log-space fallback, and the loss forward+backward
(``LatentTree(max_dist=5).nll`` or ``Chain(order=1).nll``, the training loss) per batch with this
checkout's structs and with another checkout's (``--baseline``, e.g. ``git archive 1afb657``), runs
alternating in one process, median process CPU time.

    python -m projects.paper.scripts.trained_scores dump --factory nldm_tagger --epochs 0,1,3,10 --out /tmp/scores
    python -m projects.paper.scripts.trained_scores replay /tmp/scores --baseline /tmp/nldm_base
"""
import argparse
import random
import sys
import time
from pathlib import Path

if not __package__:  # run by path: the repository root on sys.path (for projects.paper.*), not this folder
    sys.path[0] = str(Path(__file__).resolve().parents[3])

import torch


def dump(args) -> None:
    import spacy
    from spacy.util import fix_random_seed, minibatch
    from thinc.api import xp2torch

    from projects.paper.registry import canonical
    from projects.paper.runs.loop import DATASETS, _examples

    torch.set_num_threads(1)
    fix_random_seed(args.seed)
    info = DATASETS[canonical(args.dataset)]
    nlp = spacy.blank(info["lang"])
    nlp.add_pipe(args.factory, name="tagger", config={"attr": "tag"})
    train = _examples(nlp, Path(args.corpus) / info["path"] / "train.spacy")
    sgd = nlp.initialize(lambda: train)
    pipe = nlp.get_pipe("tagger")
    probe = list(minibatch(train, size=16))[: args.batches]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stages = sorted(int(e) for e in args.epochs.split(","))
    rng = random.Random(args.seed)
    epoch, start = 0, time.process_time()
    for target in stages:
        while epoch < target:
            order = list(train)
            rng.shuffle(order)
            losses = {}
            for batch in minibatch(order, size=16):
                nlp.update(batch, sgd=sgd, losses=losses)
            epoch += 1
            print(f"epoch {epoch}: loss {losses['tagger']:.1f} ({time.process_time() - start:.0f} s CPU)", flush=True)
        saved = []
        for batch in probe:
            scores = pipe.model.predict([eg.predicted for eg in batch])
            gold = pipe._gold_mask(batch, scores)
            saved.append({"F": xp2torch(scores.scores).clone(), "lengths": torch.from_numpy(scores.lengths).clone(),
                          "gold": torch.from_numpy(gold).clone()})
        path = out / f"{args.factory}-e{target}.pt"
        torch.save({"factory": args.factory, "epochs": target, "batches": saved}, path)
        print(f"wrote {path}", flush=True)


# -- replay -----------------------------------------------------------------------------------------------


def spread(batches) -> dict:
    """Score statistics over the real tokens: std of all entries, the mean per-token range (max - min over
    every (direction, context, label)), of the emission part (labels, context fixed) and of the contexts."""
    values, ranges, label_ranges, context_ranges = [], [], [], []
    for item in batches:
        F, lengths = item["F"], item["lengths"]
        real = torch.arange(F.shape[1])[None, :] < lengths[:, None]
        tok = F[real]  # (T, X, C, M)
        values.append(tok.flatten())
        flat = tok.flatten(1)
        ranges.append(flat.amax(1) - flat.amin(1))
        label_ranges.append((tok.amax(-1) - tok.amin(-1)).flatten(1).mean(1))  # over labels per context
        context_ranges.append((tok.amax(-2) - tok.amin(-2)).flatten(1).mean(1))  # over contexts per label
    v = torch.cat(values)
    return {"std": float(v.std()), "min": float(v.min()), "max": float(v.max()),
            "token_range": float(torch.cat(ranges).mean()), "label_range": float(torch.cat(label_ranges).mean()),
            "context_range": float(torch.cat(context_ranges).mean())}


def fallback_share(structs_module, F, lengths, max_dist) -> dict:
    """Contractions (stages) with some span recomputed in log space, and recomputed spans / all spans, of one
    log Z of the tree from DirectionalScores (this checkout's Inside only)."""
    from spacy_nldm.structs.inside import Inside
    from spacy_nldm.structs.semiring import LogSemiring
    from spacy_nldm.structs.tree import _prepare

    problem = _prepare(structs_module.DirectionalScores(F), lengths, None, None, max_dist)
    inside = Inside(LogSemiring(), problem.arcs, problem.allowed, problem.lengths, problem.limit)
    reencoded = [0]
    if hasattr(inside, "_encode_rows"):  # incomplete items re-encoded from their log values
        original = inside._encode_rows

        def counting(w, rows):
            reencoded[0] += len(rows[0])
            return original(w, rows)

        inside._encode_rows = counting
    inside.run()
    stages = spans = redone_stages = redone_spans = 0
    n = inside.n
    for w in range(1, inside.limit + 1):
        count = int((inside.lengths[:, None] >= torch.arange(w, n + 1)[None, :]).sum())  # spans within sentences
        for rows in (inside.inner_rows[w], inside.right.rows[w], inside.left.rows[w]):
            stages += 1
            spans += count
            if rows is not None:
                redone_stages += 1
                redone_spans += len(rows[0])
    for i in inside.tail_order():
        count = int(inside.tail_active(i).sum())
        if count:
            rows = inside.tail.rows[i]
            stages += 1
            spans += count
            if rows is not None:
                redone_stages += 1
                redone_spans += len(rows[0])
    return {"stages": stages, "redone_stages": redone_stages, "spans": spans, "redone_spans": redone_spans,
            "reencoded": reencoded[0]}


def chain_fallback(F, lengths) -> dict:
    """Sentences of log Z that the chain redoes in its log-space recursion (this checkout's chain)."""
    from spacy_nldm.models.structure import Chain
    from spacy_nldm.structs import chain

    counts = {"sentences": 0, "log_space": 0}
    original = chain._log_recursions

    def counting(potentials, lengths, backward):
        counts["log_space"] += int((lengths > 0).sum())
        return original(potentials, lengths, backward)

    chain._log_recursions = counting
    try:
        structure = Chain(order=1)
        for _, Fb, lens in structure._buckets(F, lengths):
            counts["sentences"] += len(lens)
            chain.crf_log_partition(structure.expand(Fb), lens)
    finally:
        chain._log_recursions = original
    return counts


def replay(args) -> None:
    from spacy_nldm import structs
    from spacy_nldm.cli.bench_peers import alternate, load_baseline
    from spacy_nldm.models import structure

    torch.set_num_threads(1)
    baseline = load_baseline(args.baseline) if args.baseline else None
    files = sorted(Path(args.folder).glob("*.pt"), key=lambda p: (p.name.split("-e")[0], int(p.stem.split("-e")[1])))
    print("| file | score std | min..max | token range | label range | context range | "
          "redone stages | redone spans | this s/batch | baseline s/batch | this / baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in files:
        data = torch.load(path)
        tree = data["factory"] == "nldm_tagger"
        batches = data["batches"]
        s = spread(batches)
        redone = ""
        if tree:
            totals = {"stages": 0, "redone_stages": 0, "spans": 0, "redone_spans": 0, "reencoded": 0}
            for item in batches:
                for k, v in fallback_share(structs, item["F"], item["lengths"], args.max_dist).items():
                    totals[k] += v
            redone = (f"{totals['redone_stages']}/{totals['stages']} | "
                      f"{100 * totals['redone_spans'] / max(1, totals['spans']):.1f}% "
                      f"(re-encoded {100 * totals['reencoded'] / max(1, totals['spans']):.1f}%)")
        else:
            totals = {}
            for item in batches:
                for k, v in chain_fallback(item["F"], item["lengths"]).items():
                    totals[k] = totals.get(k, 0) + v
            redone = f"- | {100 * totals['log_space'] / max(1, totals['sentences']):.1f}% of sentences"
        make = (lambda: structure.LatentTree(max_dist=args.max_dist)) if tree else (lambda: structure.Chain(order=1))

        def loss(module):
            structure.structs = module
            try:
                for item in batches:
                    F = item["F"].clone().requires_grad_(True)
                    make().nll(F, item["lengths"], item["gold"]).backward()
            finally:
                structure.structs = structs

        ours = lambda: loss(structs)  # noqa: E731
        if baseline is not None:
            theirs = lambda: loss(baseline)  # noqa: E731
            a, b = alternate(ours, theirs, args.repeats)
        else:
            a, b = alternate(ours, lambda: None, args.repeats)
        per = len(batches)
        print(f"| {path.stem} | {s['std']:.2f} | {s['min']:.0f}..{s['max']:.0f} | {s['token_range']:.1f} | "
              f"{s['label_range']:.1f} | {s['context_range']:.1f} | {redone} | {a / per:.4f} | "
              f"{b / per:.4f} | {a / b if b else float('nan'):.2f} |", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--factory", default="nldm_tagger")
    d.add_argument("--dataset", default="twitter")
    d.add_argument("--corpus", default="corpus")
    d.add_argument("--epochs", default="0,1,3,10")
    d.add_argument("--batches", type=int, default=8)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", required=True)
    r = sub.add_parser("replay")
    r.add_argument("folder")
    r.add_argument("--baseline", default=None)
    r.add_argument("--max-dist", type=int, default=5)
    r.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    {"dump": dump, "replay": replay}[args.command](args)


if __name__ == "__main__":
    main()
