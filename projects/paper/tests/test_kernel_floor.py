"""The multiply-add count of scripts/kernel_floor.py: per token, away from the sentence's ends, it is the
closed form of the docstring, sum_{w=1..k} (3 w + 2) M^2 + k M^2."""
import pytest

from projects.paper.scripts.kernel_floor import inside_macs


@pytest.mark.parametrize("k, m", [(1, 4), (3, 25), (5, 17)])
def test_the_count_per_token_tends_to_the_closed_form(k, m):
    closed = (sum(3 * w + 2 for w in range(1, k + 1)) + k) * m * m
    n = 2000
    per_token = (inside_macs(n + 1, k, m) - inside_macs(n, k, m))  # one token more, far from both ends
    assert per_token == closed


def test_a_sentence_no_longer_than_k_has_no_tail_items():
    m = 3
    # n = 1: one incomplete item from the root (arc products 1 x M, splits 1 x M, complete 1 x M)
    assert inside_macs(1, 3, m) == 3 * m
