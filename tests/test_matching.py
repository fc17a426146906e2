"""Stage 4 - Hungarian one-to-one matching and weight agreement (SPEC.md sections 5-6):
the tie rule by hand, the gate after the assignment, the weight bands (the solver itself:
tests/test_solver.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import hungarian_numpy, score, trip

import evaluate as ev


@pytest.mark.parametrize("g, p, expected", [
    (0.8, 0.7, 0.5),     # |0.8-0.7| = 0.10000000000000009 > 0.1 -> 0.5 band
    (0.1, 0.0, 1.0),     # exactly 0.1 -> 1.0
    (0.5, 0.4, 1.0),     # 0.09999999999999998
    (0.2, 0.0, 0.5),     # exactly 0.2 -> 0.5
    (0.9, 0.7, 0.0),     # 0.20000000000000007 > 0.2 -> 0.0
    (0.3, 0.0, 0.0),
    (1, 1, 1.0),         # ints
    (1, 0, 0.0),
    (0.7, 0.8, 0.5),     # symmetric
    ("0.8", 0.8, 0.0),   # non-numeric -> 0.0
    (None, 0.8, 0.0),
    (True, 1.0, 0.0),
])
def test_weight_agreement(g, p, expected):
    assert ev.weight_agreement(g, p) == expected


def test_weight_band_edge_is_ieee():
    assert abs(0.8 - 0.7) == 0.10000000000000009
    assert abs(0.9 - 0.7) == 0.20000000000000007


def test_hungarian_tie_rule_hand_trace():
    # cost = [[0, 0.5], [0.5, 1]]: both assignments cost 1.0. Identity accepts only
    # (0,0) (align 1.0; (1,1) has align 0.0); the anti-diagonal would accept (0,1) and
    # (1,0) (align 0.5 each). Classic algorithm, rows added in order (1-based below):
    #  row 1: minv = [0, 0.5] -> first strict minimum col 1 (delta 0), col 1 free -> row1->col1.
    #  row 2: minv = [0.5, 1], way = [0, 0]; delta = 0.5 at col 1 (first min);
    #         u2 = 0.5, v0 = -0.5, minv -> [0, 0.5]; col 1 taken by row 1, scan from row 1:
    #         cur(col 2) = 0.5 - u1(0) - v2(0) = 0.5, NOT strictly < minv[2] = 0.5, so
    #         way[2] stays 0; delta = 0.5 at col 2, free -> augment p[2] = row 2.
    #  result: [0, 1] (identity).
    assert ev.hungarian([[0.0, 0.5], [0.5, 1.0]]) == [0, 1]
    assert ev._hungarian_python([[0.0, 0.5], [0.5, 1.0]], 2, 2) == [0, 1]
    assert hungarian_numpy(np.array([[0.0, 0.5], [0.5, 1.0]])) == [0, 1]
    # all-equal: columns taken in order
    assert ev.hungarian([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]) == [0, 1]
    assert ev.hungarian([[1.0, 1.0]]) == [0]
    # a unique optimum that is not the identity
    assert ev.hungarian([[0.0, 0.0], [0.0, 1.0]]) == [1, 0]


def test_tie_rule_in_scoring():
    # gold G1 = (alpha, based_on, beta), G2 = (gamma, part_of, beta)
    # preds P1 = (alpha, based_on, beta), P2 = (alpha, based_on, delta)
    # (distinct single-token words: Jaccard 0 caps the lexical score at 0.5 < 0.8 -> 0)
    # align: G1-P1 = 1.0; G1-P2 = 0.45 + 0.10 = 0.55 (src + rel); G2-P1 = 0.45 (tgt);
    # G2-P2 = 0. cost = [[0, 1-0.55 = 0.44999999999999996], [0.55, 1]].
    # Identity costs 1.0, the anti-diagonal 0.44999999999999996 + 0.55 = 1.0 too: a tie.
    # Trace: row 1 -> col 1 (cost 0). Row 2: delta 0.55 at col 1, minv[2] -> 1 - 0.55 =
    # 0.44999999999999996; from row 1, cur(col 2) = 0.44999999999999996 is not strictly
    # smaller, so way[2] = 0 and row 2 takes col 2: identity. Accepted: (G1, P1) only
    # (align 0 < 0.5 for G2-P2). The anti-diagonal would have accepted (G1, P2), which is
    # not even an entity match (tgt 0): entity_tp would be 0 instead of 1.
    assert 0.45 * 1 + 0.45 * 0 + 0.1 * 1 == 0.55 and (1 - 0.55) + 0.55 == 1.0
    gold = [trip("alpha", "based_on", "beta"), trip("gamma", "part_of", "beta")]
    preds = [trip("alpha", "based_on", "beta"), trip("alpha", "based_on", "delta")]
    res = ev.match_triplets(ev.normalize_triplets(gold), ev.normalize_triplets(preds), ev.Similarity())
    assert [(p.gold, p.pred) for p in res.pairs] == [(0, 0)]
    assert res.unmatched_gold == (1,) and res.unmatched_pred == (1,)
    m = score(gold, preds, "alpha beta gamma delta")
    assert (m["entity_tp"], m["full_tp"]) == (1, 1)


def test_gate_after_assignment():
    # SPEC section 5: the gate is applied after the assignment.
    # gold G1 = (alpha, based_on, beta), G2 = (gamma, part_of, delta)
    # P1 = (alpha, part_of, delta): align(G1,P1) = 0.45 (src), align(G2,P1) = 0.45 + 0.1 = 0.55
    # P2 = (omega, part_of, beta):  align(G1,P2) = 0.45 (tgt), align(G2,P2) = 0.1 (rel)
    # identity = 0.45 + 0.1 = 0.55, anti-diagonal = 0.45 + 0.55 = 1.0 -> anti wins:
    # (G1,P2) align 0.45 rejected, (G2,P1) align 0.55 accepted.
    gold = [trip("alpha", "based_on", "beta"), trip("gamma", "part_of", "delta")]
    preds = [trip("alpha", "part_of", "delta"), trip("omega", "part_of", "beta")]
    res = ev.match_triplets(ev.normalize_triplets(gold), ev.normalize_triplets(preds), ev.Similarity())
    assert [(p.gold, p.pred) for p in res.pairs] == [(1, 0)]
    pair = res.pairs[0]
    assert (pair.source_sim, pair.target_sim, pair.relation_sim) == (0.0, 1.0, 1.0)
    assert pair.align_sim == pytest.approx(0.55, abs=1e-15)
    # align_accept = 0.4 accepts both
    res = ev.match_triplets(ev.normalize_triplets(gold), ev.normalize_triplets(preds), ev.Similarity(), 0.4)
    assert sorted((p.gold, p.pred) for p in res.pairs) == [(0, 1), (1, 0)]


# --------------------------------------------------------------------------------------
# The list path of match_triplets (small lexical entries) against the numpy definition
# --------------------------------------------------------------------------------------

def numpy_matching(gold, preds, similarity, accept):
    """SPEC.md section 5 as numpy arrays: the field similarities pair by pair (field,
    relation), align = 0.45 src + 0.45 tgt + 0.10 rel, the padded square solved by the
    scalar row-by-row solver, then the gate; (gold, pred, src, tgt, rel, align, exact) per pair."""
    src = np.array([[similarity.field(g.source, p.source) for p in preds] for g in gold])
    tgt = np.array([[similarity.field(g.target, p.target) for p in preds] for g in gold])
    rel = np.array([[similarity.relation(g.relation, p.relation) for p in preds] for g in gold])
    align = 0.45 * src + 0.45 * tgt + 0.10 * rel
    n, m = align.shape
    size = max(n, m)
    square = np.ones((size, size))
    square[:n, :m] = 1.0 - align
    assignment = ev._hungarian_python(square.tolist(), size, size)[:n]
    return [(i, j, src[i, j], tgt[i, j], rel[i, j], align[i, j],
             (gold[i].source, gold[i].relation, gold[i].target) == (preds[j].source, preds[j].relation, preds[j].target))
            for i, j in enumerate(assignment) if j < m and align[i, j] >= accept]


def test_small_lexical_matching_equals_the_numpy_definition():
    # tie-heavy entries: few distinct titles (equal, near-equal, unrelated), relations that
    # differ only by "_" vs " ", every shape up to 9 x 9, three thresholds and two gates
    rng = np.random.default_rng(20251201)
    titles = ["alpha", "alpha beta", "alpha betas", "gamma", "", "beta alpha", "delta"]
    relations = ["based_on", "based on", "part_of", "extends"]
    shapes, shortcuts = set(), 0
    for _ in range(3000):
        n, m = (int(x) for x in rng.integers(1, 10, size=2))
        shapes.add((n, m))

        def items(k):
            return [trip(str(rng.choice(titles)), str(rng.choice(relations)), str(rng.choice(titles))) for _ in range(k)]
        gold, preds = ev.normalize_triplets(items(n)), ev.normalize_triplets(items(m))
        similarity = ev.Similarity(float(rng.choice([0.5, 0.8, 0.95])))
        accept = float(rng.choice([0.5, 0.9]))
        assert similarity._pair_rows(gold, preds) is not None        # the list path is taken
        result = ev.match_triplets(gold, preds, similarity, accept)
        expected = numpy_matching(gold, preds, ev.Similarity(similarity.threshold), accept)
        found = [(p.gold, p.pred, p.source_sim, p.target_sim, p.relation_sim, p.align_sim, p.exact) for p in result.pairs]
        assert found == expected
        assert all(type(x) is float for p in result.pairs for x in (p.source_sim, p.align_sim))
        assert result.unmatched_gold == tuple(i for i in range(n) if i not in {p[0] for p in expected})
        assert result.unmatched_pred == tuple(j for j in range(m) if j not in {p[1] for p in expected})
        shortcuts += not expected
    assert shapes == {(n, m) for n in range(1, 10) for m in range(1, 10)}
    assert shortcuts > 100      # entries without an acceptable pair (no solve) were among them


def test_match_from_similarities_takes_the_same_path_and_refuses_non_finite():
    gold = ev.normalize_triplets([trip("a", "based_on", "b"), trip("c", "part_of", "d")])
    preds = ev.normalize_triplets([trip("c", "part_of", "d"), trip("a", "based_on", "x")])
    src, tgt, rel = ev.embedding_matching(gold, preds, ev.Similarity())
    result = ev.match_from_similarities(gold, preds, src, tgt, rel)
    assert [(p.gold, p.pred, p.exact) for p in result.pairs] == [(0, 1, False), (1, 0, True)]
    assert result == ev.match_triplets(gold, preds, ev.Similarity())
    bad = src.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        ev.match_from_similarities(gold, preds, bad, tgt, rel)


def test_pair_rows_only_for_the_lexical_backend_itself():
    gold = ev.normalize_triplets([trip("a", "based_on", "b")])

    class Other(ev.Similarity):
        def _gated(self, a, b):
            return super()._gated(a, b)

    assert ev.Similarity()._pair_rows(gold, gold) == ([[1.0]], [[1.0]], [[1.0]])
    assert Other()._pair_rows(gold, gold) is None
    many = ev.normalize_triplets([trip("a", "based_on", "b")] * 16)
    assert ev.Similarity()._pair_rows(many, many) is None          # 256 pairs: numpy bounds
