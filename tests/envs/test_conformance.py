"""Every environment adapter passes the same contract check (tests/envs/conformance.py), directly and through
both environment pools (env.pool=process and env.pool=ray on a local Ray instance)."""

import pytest

from tests.envs.conformance import PooledEnv, check_conformance

CASES = {
    "alfworld": ("alfworld_env_factory", "valid_unseen"),
    "diagnostics": ("diagnostics_env_factory", "valid_seen"),
    "webshop": ("webshop_env_factory", "test"),
    "webarena": ("webarena_env_factory", "test"),
    "choice": ("choice_env_factory", "test"),
}


@pytest.mark.parametrize("env_name", sorted(CASES))
def test_conformance(env_name, request):
    fixture, split = CASES[env_name]
    make_env = request.getfixturevalue(fixture)  # the webshop fixture skips only if its adapter is missing
    check_conformance(make_env, split)


@pytest.mark.parametrize("env_name", sorted(CASES))
def test_conformance_through_pool(env_name, request, new_pool):
    fixture, split = CASES[env_name]
    make_env = request.getfixturevalue(fixture)
    with new_pool(make_env.picklable, num_workers=2, step_timeout_s=120) as pool:
        check_conformance(lambda: PooledEnv(pool, make_env), split)
        assert pool.restarts == 0 and pool.live_keys == set()
