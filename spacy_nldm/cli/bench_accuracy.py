"""Mean ± standard deviation as the benchmark tables print it (``bench spacy-train`` imports it from here)."""
import statistics
from typing import List


def _stats(values: List[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"
