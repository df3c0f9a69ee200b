"""Load an installed packaged pipeline by name with spacy.load and tag a sentence (the `package` workflow's check).

    python -m projects.paper.scripts.check_package en_nldm_twitter
"""
import sys

import spacy
from spacy.tokens import Doc


def main() -> None:
    name = sys.argv[1]
    nlp = spacy.load(name)
    doc = nlp("@user I predict I won't win a single game I bet on. Got Cliff Lee today #baseball :)")
    print(f"spacy.load({name!r}): pipeline {nlp.pipe_names}, version {nlp.meta.get('version')}")
    print(" ".join(f"{t.text}/{t.tag_}" for t in doc))  # raw text, cut by the pipeline's tokenizer
    if Doc.has_extension("nldm_tree_score") or spacy.tokens.Token.has_extension("nldm_head"):
        heads = [getattr(t._, "nldm_head", None) for t in doc] if spacy.tokens.Token.has_extension("nldm_head") else None
        print("latent tree heads:", heads)
    if not all(t.tag_ for t in doc):
        sys.exit("error: the loaded pipeline left tokens untagged")
    if nlp.config["nlp"]["tokenizer"].get("@tokenizers") == "spacy-nldm.TweetTokenizer.v1" and "won't" not in [t.text for t in doc]:
        sys.exit("error: the ARK tokenizer should keep \"won't\" whole")


if __name__ == "__main__":
    main()
