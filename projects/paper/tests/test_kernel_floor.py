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


@pytest.mark.parametrize("k, m", [(1, 4), (3, 25), (5, 17)])
def test_the_subtree_messages_count_per_token_tends_to_its_closed_form(k, m):
    """k (k + 1) / 2 subtrees a token hung left and right, k tail subtrees hung left (M^2 each); the complete
    items' elementwise sums, sum_{w <= k} w (w + 1) / 2 terms each for CR and CL, and a tail row's k (k + 1) / 2
    (M each)."""
    from projects.paper.scripts.kernel_floor import subtree_macs

    closed = (k * (k + 1) + k) * m * m + (2 * sum(w * (w + 1) // 2 for w in range(1, k + 1)) + k * (k + 1) // 2) * m
    n = 2000
    assert subtree_macs(n + 1, k, m) - subtree_macs(n, k, m) == closed
