"""Each wait policy's contract, observed on raw batches (ferry_submit).

A read of an empty pipe is a call that completes only when the test
program writes to the pipe, so "the batch returned before that call
completed" is a fact, not a timing: `none` returns with calls pending,
`any` after the first, `some` at its limit or its timeout, `all` only once
every call completed (a thread writes the pipe later), and `adaptive`
never waits for a batch that will not fill.
"""
import pytest

from aggregate_helpers import agg  # noqa: F401


@pytest.mark.parametrize("case", ["none", "any", "some_limit", "some_timeout", "all", "adaptive"])
def test_wait_policy_contract(agg, case):
    r = agg("agg_policies", case, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"ok {case}")


def test_raw_batch_rejects_bad_arguments(agg):
    r = agg("agg_policies", "invalid", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
