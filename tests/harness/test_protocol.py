"""The action protocol never raises and classifies every response as env / harness / invalid."""

import itertools
import random

import pytest

from evoharness_rl.harness.protocol import (
    HARNESS_VERBS,
    MAX_ACTION_CHARS,
    ActionKind,
    format_response,
    parse_response,
)

ENV, HARNESS, INVALID = ActionKind.ENV, ActionKind.HARNESS, ActionKind.INVALID

# (response, expected kind, expected action or verb) -- hand-written cases, tags format.
HAND_WRITTEN = [
    ("<think>go look</think><action>go to shelf 1</action>", ENV, "go to shelf 1"),
    ("<action>go to shelf 1</action>", ENV, "go to shelf 1"),
    ("<think>x</think>\n<action>\n  take mug 1 from desk 1 \n</action>\n", ENV, "take mug 1 from desk 1"),
    ("<ACTION>open fridge 1</ACTION>", ENV, "open fridge 1"),
    ("< action >open fridge 1< / action >", ENV, "open fridge 1"),
    ("<action>'go to shelf 1'</action>", ENV, "go to shelf 1"),
    ("<action>`inventory`</action>", ENV, "inventory"),
    ("<action>go to shelf 1</action><action>go to shelf 1</action>", ENV, "go to shelf 1"),
    ("<action>go to shelf 1</action><action>go to desk 1</action>", INVALID, None),
    ("<action></action>", INVALID, None),
    ("<action>   </action>", INVALID, None),
    ("", INVALID, None),
    ("   \n\t ", INVALID, None),
    (None, INVALID, None),
    ("go to shelf 1", INVALID, None),
    ("<think>only thinking</think>", INVALID, None),
    ("<think>unclosed thinking <action>look</action>", ENV, "look"),
    ("<action>go to shelf 1", ENV, "go to shelf 1"),
    ("<action>go to shelf 1\nmore text", ENV, "go to shelf 1"),
    ("<action>", INVALID, None),
    ("</action>go to shelf 1<action>", INVALID, None),
    ("<action>track [mug]</action>", HARNESS, "track"),
    ("<action>track</action>", INVALID, None),
    ("<action>TRACK [mug]</action>", HARNESS, "track"),
    ("<action>commit [find the mug]</action>", HARNESS, "commit"),
    ("<action>commit []</action>", INVALID, None),
    ("<action>commit</action>", INVALID, None),
    ("<action>recall [where to find mug]</action>", HARNESS, "recall"),
    ("<action>recall: where to find mug</action>", INVALID, None),
    ("<action>recall where to find mug</action>", INVALID, None),
    ("<action>note [mugs are often in cabinets]</action>", HARNESS, "note"),
    ("<action>note [[nested] brackets]</action>", HARNESS, "note"),
    ("<action>note []</action>", INVALID, None),
    ("<action>tracker [mug]</action>", ENV, "tracker [mug]"),
    ("<action>noted</action>", ENV, "noted"),
    ("<action>search[red shoes]</action>", ENV, "search[red shoes]"),
    ("<action>click[Buy Now]</action>", ENV, "click[Buy Now]"),
    ("<action>go\u200b to shelf 1</action>", ENV, "go to shelf 1"),
    ("<action>ｇｏ ｔｏ shelf 1</action>", ENV, "go to shelf 1"),
    ("<action>go to shelf 1\x00\x07</action>", ENV, "go to shelf 1"),
    ("<action>aller à l'étagère 1</action>", ENV, "aller à l'étagère 1"),
    ("<action>去 书架 1</action>", ENV, "去 书架 1"),
    ("<action>" + "x" * (MAX_ACTION_CHARS + 5) + "</action>", INVALID, None),
    ("<action>" + "a " * 300 + "</action>", ENV, None),
    ("blah " * 50_000 + "<action>look</action>", INVALID, None),  # beyond MAX_RESPONSE_CHARS: action cut off
    ("<think>" + "t" * 100_000 + "</think><action>look</action>", INVALID, None),
    ("<action>note [" + "n" * 5_000 + "]</action>", HARNESS, "note"),
    ("<action><action>look</action></action>", ENV, "<action>look"),
    ("text before <action>look</action> text after", ENV, "look"),
    ("<action>look</action> and then <action>inventory", ENV, "look"),
    ("```look```", INVALID, None),
]


@pytest.mark.parametrize("response,kind,expected", HAND_WRITTEN)
def test_hand_written_tags(response, kind, expected):
    parsed = parse_response(response, "tags")
    assert parsed.kind is kind, parsed
    if kind is ENV and expected is not None:
        assert parsed.action == expected
    if kind is HARNESS:
        assert parsed.verb == expected
    if kind is INVALID:
        assert parsed.reason


FENCED = [
    ("Let me click.\n```click [12]```", ENV, "click [12]"),
    ("reasoning\n```\nclick [12]\n```", ENV, "click [12]"),
    ("```python\nclick [12]\n```", ENV, "click [12]"),
    ("first ```click [1]``` then ```type [3] [hello] [1]```", ENV, "type [3] [hello] [1]"),
    ("```track [values]```", HARNESS, "track"),
    ("```stop [42]```", ENV, "stop [42]"),
    ("no block at all", INVALID, None),
    ("``````", INVALID, None),
    ("```unclosed click [1]", INVALID, None),
    ("<action>click [1]</action>", INVALID, None),
]


@pytest.mark.parametrize("response,kind,expected", FENCED)
def test_fenced(response, kind, expected):
    parsed = parse_response(response, "fenced")
    assert parsed.kind is kind, parsed
    if kind is ENV:
        assert parsed.action == expected
    if kind is HARNESS:
        assert parsed.verb == expected


# Harness grammar (paper Appendix L): verb [non-empty argument]. (action, kind, (verb, argument) or the
# right form the reason must show).
GRAMMAR = [
    ("commit [pick mug]", HARNESS, ("commit", "pick mug")),
    ("recall [where to find egg]", HARNESS, ("recall", "where to find egg")),
    ("RECALL [x]", HARNESS, ("recall", "x")),
    ("Note [Mugs Are In Cabinets]", HARNESS, ("note", "Mugs Are In Cabinets")),
    ("recall[x]", HARNESS, ("recall", "x")),
    ("track   [  egg   1 ]", HARNESS, ("track", "egg 1")),
    ("note [[nested] brackets]", HARNESS, ("note", "nested] brackets")),
    ("recall where is egg", INVALID, "recall [query]"),
    ("note: x", INVALID, "note [insight]"),
    ("note : x", INVALID, "note [insight]"),
    ("track []", INVALID, "track [object]"),
    ("track [ ]", INVALID, "track [object]"),
    ("track ['']", INVALID, "track [object]"),
    ("track", INVALID, "track [object]"),
    ("commit", INVALID, "commit [subgoal]"),
    ("recall [x", INVALID, "recall [query]"),
    ("recall [x] and then go to shelf 1", INVALID, "recall [query]"),
    ("commit (pick mug)", INVALID, "commit [subgoal]"),
    ("COMMIT: pick mug", INVALID, "commit [subgoal]"),
    ("track-egg", INVALID, "track [object]"),
    ("tracker [mug]", ENV, "tracker [mug]"),
    ("notes [x]", ENV, "notes [x]"),
    ("go to shelf 1", ENV, "go to shelf 1"),
    ("take note 1 from desk 2", ENV, "take note 1 from desk 2"),
    ("search[recall where is egg]", ENV, "search[recall where is egg]"),
]


@pytest.mark.parametrize("action,kind,expected", GRAMMAR)
@pytest.mark.parametrize("action_format", ["tags", "fenced"])
def test_harness_grammar_is_strict(action, kind, expected, action_format):
    parsed = parse_response(format_response(action_format, "why", action), action_format)
    assert parsed.kind is kind, parsed
    if kind is HARNESS:
        assert (parsed.verb, parsed.action) == expected
    elif kind is ENV:
        assert parsed.action == expected
    else:
        # one line that shows the right form of the verb the model tried
        assert "\n" not in parsed.reason and "brackets" in parsed.reason and expected in parsed.reason


def test_a_near_miss_of_a_disabled_verb_says_it_is_not_available():
    parsed = parse_response("<action>recall where is egg</action>", "tags", enabled_verbs=("commit",))
    assert parsed.kind is INVALID and "not available" in parsed.reason


def test_disabled_verbs_are_invalid_with_a_reason_naming_them():
    parsed = parse_response("<action>track [mug]</action>", "tags", enabled_verbs=("commit",))
    assert parsed.kind is INVALID and "track" in parsed.reason and "commit" in parsed.reason
    parsed = parse_response("<action>recall [x]</action>", "tags", enabled_verbs=())
    assert parsed.kind is INVALID and "not available" in parsed.reason


def test_harness_argument_is_cut_to_the_limit():
    parsed = parse_response("<action>note [" + "n" * 5_000 + "]</action>", "tags")
    assert parsed.kind is HARNESS and 0 < len(parsed.action) <= 400


def test_unknown_format_is_a_programming_error():
    with pytest.raises(ValueError, match="action_format"):
        parse_response("<action>x</action>", "xml")


def _generated_corpus(n: int = 400) -> list[tuple[str, ActionKind]]:
    """Random malformed/adversarial responses with the classification they must get."""
    rng = random.Random(1234)
    actions = ["go to shelf 1", "take mug 1 from desk 2", "open fridge 1", "search[blue jeans]", "click[Buy Now]"]
    junk = ["", " ", "\n", "<", ">", "</", "<act", "ion>", "[", "]", "\u200b", "é", "🙂", "\x00", "```", "<think>", "</think>"]
    corpus = []
    for i in range(n):
        choice = i % 6
        action = rng.choice(actions)
        noise = "".join(rng.choice(junk) for _ in range(rng.randint(0, 8)))
        if choice == 0:  # well-formed env action with noise outside the tags
            corpus.append((noise + f"<think>{noise}</think><action>{action}</action>" + noise.replace("<", "").replace("```", ""), ENV))
        elif choice == 1:  # well-formed harness action
            verb = rng.choice(HARNESS_VERBS)
            corpus.append((f"<think>x</think><action>{verb} [{action}]</action>", HARNESS))
        elif choice == 2:  # tags missing entirely
            corpus.append((noise.replace("<", "").replace(">", "") + action, INVALID))
        elif choice == 3:  # two conflicting actions
            corpus.append((f"<action>{action}</action><action>{action} x</action>", INVALID))
        elif choice == 4:  # random bytes-like text
            text = "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 300)))
            corpus.append((text.replace("<", "").replace(">", ""), INVALID))
        else:  # empty action block with noise inside
            inner = "".join(rng.choice([" ", "\n", "\t", "\u200b"]) for _ in range(rng.randint(0, 5)))
            corpus.append((f"<action>{inner}</action>", INVALID))
    return corpus


def test_generated_corpus_never_raises_and_is_classified():
    corpus = _generated_corpus()
    assert len(corpus) + len(HAND_WRITTEN) + len(FENCED) >= 200
    for response, kind in corpus:
        parsed = parse_response(response, "tags")
        assert parsed.kind is kind, (response, parsed)
        if kind is INVALID:
            assert parsed.reason


def test_every_format_survives_pathological_inputs():
    weird = ["<" * 10_000, "<action>" * 5_000, "```" * 5_000, "\x00" * 1_000, "[" * 10_000, "<think>" * 3_000]
    for response, fmt in itertools.product(weird, ("tags", "fenced")):
        parsed = parse_response(response, fmt)
        assert parsed.kind in (ENV, HARNESS, INVALID)


@pytest.mark.parametrize("action_format", ["tags", "fenced"])
def test_format_response_round_trips_through_the_parser(action_format):
    parsed = parse_response(format_response(action_format, "the key is in box 2", "open box 2"), action_format, ())
    assert parsed.kind is ActionKind.ENV and parsed.action == "open box 2"
    harness = parse_response(format_response(action_format, "plan", "commit [find key]"), action_format, ("commit",))
    assert harness.kind is ActionKind.HARNESS and (harness.verb, harness.action) == ("commit", "find key")


def test_compact_system_prompt_names_the_format_the_actions_and_only_enabled_verbs():
    from evoharness_rl.harness.protocol import compact_system_prompt

    tags = compact_system_prompt("tags", "ADMISSIBLE COMMANDS", ("commit", "recall"))
    assert "<think>" in tags and "ADMISSIBLE COMMANDS" in tags and "commit [subgoal]" in tags
    assert "track" not in tags and "note" not in tags
    fenced = compact_system_prompt("fenced", "ACTIONS")
    assert "harness" not in fenced and "```" in fenced
