"""collect(): successful teacher episodes -> trajectories.jsonl + SFT dataset + gate summary."""

from __future__ import annotations

import functools
import json

import pytest
from fake_eval import fake_config, fake_engine
from tests.fakes.steps import ListBackend, make_fake_env

from evoharness_rl.errors import UserError
from evoharness_rl.eval.collect import collect
from evoharness_rl.rollout.engine import RolloutEngine
from evoharness_rl.rollout.pool import EnvPool
from evoharness_rl.rollout.trajectory import read_jsonl
from evoharness_rl.sft.data import load_sft_dataset


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_collect_writes_successful_episodes_and_dataset(tmp_path, context):
    cfg = fake_config(tmp_path, limit=4, **{"env.context": context, "sft.validation_fraction": 0.0})
    summary = collect(cfg, engine=fake_engine())
    c = summary["collection"]
    assert c["episodes"] == 8 and c["successful"] == 8 and c["errors"] == 0
    trajs = read_jsonl(tmp_path / "trajectories.jsonl")
    assert len(trajs) == 8 and all(t.won for t in trajs)
    dataset = load_sft_dataset(tmp_path / "dataset", "1")
    rows = dataset["train"]
    assert len(rows) == c["examples"] > 0
    if context == "per_turn":  # one example per turn: the exact prompt, then the teacher's response
        turn = trajs[0].turns[0]
        first = [r for r in rows if r["messages"][:2] == turn.messages]
        assert first and first[0]["messages"][-1] == {"role": "assistant", "content": turn.response}
    else:  # one conversation per episode (identical episodes are deduplicated)
        assert 0 < len(rows) <= 8
        assert all(r["messages"][0]["role"] == "system" and r["messages"][-1]["role"] == "assistant" for r in rows)
    assert json.loads((tmp_path / "summary.json").read_text())["collection"] == c


def test_collect_with_no_success_says_how_many_ran(tmp_path):
    pool = EnvPool(functools.partial(make_fake_env, 3), num_workers=1, step_timeout_s=30)
    engine = RolloutEngine(pool, ListBackend(["<action>look</action>"]))
    cfg = fake_config(tmp_path, limit=2, **{"env.max_steps_eval": 3})
    with pytest.raises(UserError, match="4 episodes collected, 0 succeeded"):
        collect(cfg, engine=engine)
    assert not (tmp_path / "dataset").exists()
