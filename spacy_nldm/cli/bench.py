"""``python -m spacy_nldm bench structs``: speed and memory of the structured core."""
from . import bench_app  # noqa: F401
