"""Workspace verbs, views per mode, Progress bookkeeping."""

from evoharness_rl.harness.protocol import parse_response
from evoharness_rl.harness.workspace import HarnessMode, HarnessSwitches, Progress, Workspace
from tests.fakes.keys import KeyBelief, StaticExperience


def _workspace(mode="adaptive", **switches):
    belief = KeyBelief()
    belief.reset(None, None)
    return Workspace(HarnessMode(mode), belief, StaticExperience(), HarnessSwitches(**switches), family="keys",
                     objective="find the key", recall_k=2)


def _do(ws, text):
    return ws.execute(parse_response(f"<action>{text}</action>", "tags", ws.enabled_verbs))


def test_commit_closes_the_previous_subgoal_and_returns_the_plan():
    progress = Progress(capacity=3)
    assert progress.commit("find key") == "[ ] find key"
    assert progress.commit("open box") == "[x] find key\n[ ] open box"
    progress.commit("say done")
    progress.commit("celebrate")  # over capacity: the oldest completed subgoal drops
    assert progress.render().splitlines() == ["[x] open box", "[x] say done", "[ ] celebrate"]


def test_recommitting_a_subgoal_makes_it_current_without_duplicates():
    progress = Progress()
    progress.commit("a")
    progress.commit("b")
    assert progress.commit("A") == "[x] b\n[ ] A"


def test_verbs_route_to_their_modules_and_notes_stay_local():
    ws = _workspace()
    ws.belief.update("open box 1", None)
    assert "opened boxes: 1" in _do(ws, "track [box]")
    assert _do(ws, "commit [find key]").startswith("PLAN:")
    assert "hint for where is key" in _do(ws, "recall [where is key]")
    assert ws.experience.calls == [("where is key", "keys", 2)]
    _do(ws, "note [keys hide in box 1]")
    assert ws.notes == ["keys hide in box 1"] and ws.recalled_ids == ["id-1"]


def test_adaptive_views_show_only_what_was_asked_and_track_expires():
    ws = _workspace()
    assert ws.render_views() == ""
    _do(ws, "track [box]")
    _do(ws, "commit [find key]")
    views = ws.render_views()
    assert "PLAN:" in views and "TRACK [box]" in views
    ws.after_env_step()
    assert "TRACK" not in ws.render_views() and "PLAN:" in ws.render_views()


def test_always_on_renders_all_views_and_recalls_once():
    ws = _workspace("always_on")
    assert ws.enabled_verbs == ()
    first = ws.render_views()
    assert "BELIEF:" in first and "PROGRESS:" in first and "EXPERIENCE:\nhint for find the key" in first
    ws.render_views()
    assert len(ws.experience.calls) == 1


def test_switches_remove_verbs_and_views():
    ws = _workspace(belief=False, experience=False)
    assert ws.enabled_verbs == ("commit",)
    assert parse_response("<action>track [x]</action>", "tags", ws.enabled_verbs).kind.value == "invalid"
    ws = _workspace("always_on", progress=False)
    assert "PROGRESS" not in ws.render_views()
    assert _workspace("env_only").render_views() == ""
