"""Prefix planning: rows grouped where the tokens saved pay for the calls, and the
actions' common prefix folded into the prompt."""

from coplay.policies import prefixes
from coplay.policies.prefixes import fold_common_prefix, prefix_groups, shared_prefix_len


def test_fold_keeps_one_token_per_action():
    assert fold_common_prefix((1,), ((5,), (5,))) == ((1,), ((5,), (5,)))
    assert fold_common_prefix((1,), ((5, 6), (5, 6, 7))) == ((1, 5), ((6,), (6, 7)))


def test_prefix_groups_cover_every_row_once_within_the_bound():
    seqs = [(1, 2, 3, 4, 5), (1, 2, 3, 9, 5), (1, 7, 3, 4), (1, 2), (1, 7, 3, 4, 6)]
    for bound in (1, 2, 3, 5):
        groups = prefix_groups(seqs, max_groups=bound, call_tokens=0)
        assert len(groups) <= bound
        assert sorted(i for g in groups for i in g) == list(range(len(seqs)))
    assert prefix_groups(seqs, max_groups=1, call_tokens=0) == [[0, 1, 2, 3, 4]]
    assert len(prefix_groups(seqs, max_groups=3, call_tokens=0)) == 3
    # Each row keeps its last token: (1, 2) shares at most its first.
    assert shared_prefix_len([seqs[0], seqs[3]]) == 1
    assert shared_prefix_len([seqs[2], seqs[4]]) == 3


def _variants(rows, head, split, tail):
    """``rows`` prompts: ``head`` shared tokens, one of ``split`` variant tokens, then
    ``tail`` tokens every variant shares, then a token of the row's own."""
    return [
        tuple(range(head)) + (1000 + r % split,) + tuple(range(2000, 2000 + tail)) + (3000 + r,)
        for r in range(rows)
    ]


def test_prefix_plan_splits_only_where_the_tokens_saved_pay_for_the_calls():
    cost = prefixes.CALL_TOKENS
    # The seat's mark early, the rules after it (Kuhn's shape): a group per variant.
    early = _variants(64, 2, 2, 100)
    assert sorted(map(len, prefixes.prefix_plan(early))) == [32, 32]
    # Rules first, then the board (tic-tac-toe's): one more shared token per group
    # does not pay for two more calls each, so one group shares the rules.
    late = _variants(200, 30, 3, 0)
    assert prefixes.prefix_plan(late) == [list(range(200))]
    assert len(prefixes.prefix_plan(late, call_tokens=0)) == 3
    # A small batch, or one without a shared prefix, runs plain.
    assert prefixes.prefix_plan(_variants(4, 30, 1, 0)) is None
    assert prefixes.prefix_plan([(r, 5, 6) for r in range(500)]) is None
    # The boundary: B - 1 rows saving n tokens against one more call (padding aside).
    n = 16
    rows = cost // n + 1
    shared = [tuple(range(n)) + (3000 + r,) for r in range(rows + 1)]
    assert prefixes.prefix_plan(shared[:rows]) is None
    assert prefixes.prefix_plan(shared) == [list(range(rows + 1))]
    # Padding counts: short and long prompts apart pad less, even sharing little more.
    short = [(1, 2, 7, 3000 + r) for r in range(40)]
    long = [(1, 2, 8) + tuple(range(100, 300)) + (4000 + r,) for r in range(40)]
    mixed = [x for pair in zip(short, long, strict=True) for x in pair]
    assert prefixes.prefix_plan(mixed) == [list(range(0, 80, 2)), list(range(1, 80, 2))]
    # Few rows of very different lengths: each alone pads nothing.
    assert prefixes.prefix_plan([tuple(range(10)), tuple(range(100, 1100))]) == [[0], [1]]
    assert prefixes.prefix_plan([]) is None
    assert prefix_groups([(1, 2)]) == [[0]]
