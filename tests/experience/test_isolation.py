"""One frozen snapshot per rollout batch: no episode sees an edit made during its own batch."""

import multiprocessing
import pickle

from evoharness_rl.experience import ExperienceBank, LLMConsolidator, consolidate
from evoharness_rl.experience.operations import Operation
from evoharness_rl.rollout.episode import Episode, EpisodeSettings
from tests.fakes.keys import KeyEnv


def start(snapshot, task):
    episode = Episode(KeyEnv(), EpisodeSettings(mode="adaptive", max_steps=10), experience=snapshot)
    episode.reset(task)
    return episode


def recall(episode, query="which box holds the key"):
    return episode.step(f"<action>recall [{query}]</action>").observation


def test_edits_during_a_batch_are_invisible_until_the_next_batch():
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="task:keys", family="keys", principle="the key is often in box 1")], "seed")
    snapshot = bank.snapshot()
    batch = [start(snapshot, f"train/{i}") for i in range(3)]
    assert "task-001" in recall(batch[0])

    # Mid-batch, the bank changes (another batch's consolidation, a buggy caller, ...).
    bank.update_index = 2
    bank.apply([Operation("add", category="task:keys", family="keys", principle="the key box holds the key: open every box"),
                Operation("archive", id="task-001")], "mid-batch")
    late = start(snapshot, "train/9")  # an episode started after the edit, in the same batch
    for episode in batch + [late]:
        view = recall(episode)
        assert "task-001" in view and "task-002" not in view
        episode.step("<action>note [box numbers repeat across tasks]</action>")
    for episode in batch + [late]:
        assert set(episode.workspace.recalled_ids) == {"task-001"}
        assert episode.workspace.notes == ["box numbers repeat across tasks"]  # worker-local, never the bank

    assert "task-002" in recall(start(bank.snapshot(), "train/0"))  # the next batch sees the edit


def test_notes_reach_the_bank_only_through_consolidation():
    bank = ExperienceBank()
    snapshot = bank.snapshot()
    episode = start(snapshot, "train/1")
    episode.step("<action>note [the key was in box 1]</action>")
    episode.step("<action>open box 1</action>")
    episode.step("<action>done</action>")
    assert episode.record.notes == ["the key was in box 1"] and bank.entries == {}
    prompts = []

    def model(messages):
        prompts.append(messages[-1]["content"])
        return '{"skills": [], "mistakes": [], "search_priorities": []}'

    consolidate(bank, [episode.record], LLMConsolidator(model))  # after the batch: the buffered evidence
    assert "[N1] (E1, SUCCESS) the key was in box 1" in prompts[0] and bank.entries == {}


def _recall_in_child(payload):
    snapshot = pickle.loads(payload)
    return snapshot.recall("key box", "keys", 3)


def test_a_snapshot_sent_to_a_worker_process_answers_the_same():
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="task:keys", family="keys", principle="open the key box first")], "seed")
    snapshot = bank.snapshot()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_recall_in_child, (pickle.dumps(snapshot),)) == snapshot.recall("key box", "keys", 3)
