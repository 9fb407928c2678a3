"""Fibers on a carrier (tests/programs/agg_fibers.c).

errno, malloc and stdio stay per fiber; a pthread mutex and condition
variable shared by fibers park the waiting fiber, not the carrier (else
these programs would hang); calls of one fiber keep their order; one
failing call does not disturb the others of its batch; calls io_uring has
no operation for run on worker threads; bad configurations are -EINVAL.
"""
import pytest

from aggregate_helpers import agg  # noqa: F401


@pytest.mark.parametrize("case", ["errno", "mutex", "order", "failing", "worker", "api"])
def test_fibers(agg, case, tmp_path):
    r = agg("agg_fibers", case, tmp_path, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout
    assert r.stdout.startswith("ok")


@pytest.mark.parametrize("case", ["mutex", "failing"])
@pytest.mark.parametrize("wait", ["any", "all", "none"])
def test_fibers_under_each_policy(agg, case, wait, tmp_path):
    r = agg("agg_fibers", case, tmp_path, check=False,
            env={"FERRY_MODE": "aggregate", "FERRY_AGG": f"pool=256,0,0,-1,0,{wait},0,0"})
    assert r.returncode == 0, r.stdout + r.stderr


def test_invalid_configurations_rejected(agg):
    r = agg("agg_fibers", "config", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok 18 invalid configurations rejected" in r.stdout
