"""The JPSRO(CE) benchmark's arms: what each records agrees with the run it made."""

BENCHMARK = "jpsro_recommendations"


def test_each_arm_counts_its_responses_into_its_members(bench):
    for mode in ("likeliest", "each"):
        arm = bench.run_arm("kuhn_poker", 4, "ce", mode)
        steps = arm["steps"]
        assert [s["iteration"] for s in steps] == [0, 1, 2, 3, 4]
        # Members grow by the responses each iteration trained, less the copies of
        # members (which do not join); the last trains none.
        assert arm["members"] <= 1 + sum(s["responses"] for s in steps)
        assert steps[-1]["responses"] == 0
        assert arm["members"] == 1 + sum(s["joined"] for s in steps)
        assert all(s["joined"] <= s["responses"] for s in steps)
        for before, after in zip(steps, steps[1:], strict=False):
            assert after["members"] <= before["members"] + before["responses"]
        assert all(s["ce_gap"] >= s["cce_gap"] - 1e-9 for s in steps)  # CE is the stricter
    assert max(s["responses"] for s in arm["steps"]) > 1  # each: Kuhn's CE recommends several
