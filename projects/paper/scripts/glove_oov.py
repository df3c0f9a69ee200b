"""Test accuracy of trained taggers on the tokens with and without a static vector, and their top confusions.

    python -m projects.paper.scripts.glove_oov training/glove/twitter/{softmax,crf1,nldm}/seed0/model-best \
        --vectors assets/glove/vectors --test corpus/twitter/test.spacy

A token "has a vector" when its ORTH is a key of the vectors (how spacy.StaticVectors.v2 looks it up; the GloVe
folder has lower, capitalised and upper-case keys). Prints, per model, accuracy on both groups and the five most
frequent (gold, predicted) confusions, then the tokens without a vector by gold tag (count, errors of the last
model, examples). Used by projects/paper/results/diagnosis.md section 21.
"""
import argparse
import collections
from pathlib import Path

import spacy
from spacy.tokens import Doc, DocBin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="trained pipelines (model-best folders)")
    parser.add_argument("--vectors", type=Path, default=Path("assets/glove/vectors"))
    parser.add_argument("--test", type=Path, default=Path("corpus/twitter/test.spacy"))
    args = parser.parse_args()
    for path in [args.vectors, args.test, *args.models]:
        if not path.exists():
            parser.error(f"{path} does not exist")
    vectors = spacy.load(args.vectors).vocab.vectors
    test = DocBin().from_disk(args.test)
    for model in args.models:
        nlp = spacy.load(model)
        gold = list(test.get_docs(nlp.vocab))
        predicted = nlp.pipe(Doc(nlp.vocab, words=[t.text for t in doc]) for doc in gold)
        total, right = collections.Counter(), collections.Counter()
        confusions, oov_tags, oov_errors = collections.Counter(), collections.Counter(), collections.defaultdict(list)
        for g_doc, p_doc in zip(gold, predicted):
            for g, p in zip(g_doc, p_doc):
                group = "with vector" if g.orth in vectors else "without"
                total[group] += 1
                right[group] += g.tag_ == p.tag_
                if g.tag_ != p.tag_:
                    confusions[g.tag_, p.tag_] += 1
                if group == "without":
                    oov_tags[g.tag_] += 1
                    if g.tag_ != p.tag_:
                        oov_errors[g.tag_].append(f"{g.text}->{p.tag_}")
        groups = ", ".join(f"{k} {100 * right[k] / total[k]:.2f} ({total[k]} tokens)" for k in ("with vector", "without"))
        print(f"{model}: {groups}; confusions (gold, predicted): {confusions.most_common(5)}")
    print("tokens without a vector, by gold tag (count, errors of the last model, examples):")
    for tag, count in oov_tags.most_common(12):
        print(f"  {tag} {count} {len(oov_errors[tag])} {oov_errors[tag][:5]}")


if __name__ == "__main__":
    main()
