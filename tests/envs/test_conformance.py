"""Every environment adapter passes the same contract check (tests/envs/conformance.py)."""

import pytest

from tests.envs.conformance import check_conformance

CASES = {
    "alfworld": ("alfworld_env_factory", "valid_unseen"),
    "webshop": ("webshop_env_factory", "test"),
    "webarena": ("webarena_env_factory", "test"),
}


@pytest.mark.parametrize("env_name", sorted(CASES))
def test_conformance(env_name, request):
    fixture, split = CASES[env_name]
    make_env = request.getfixturevalue(fixture)  # the webshop fixture skips only if its adapter is missing
    check_conformance(make_env, split)
