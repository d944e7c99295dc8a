"""The agent-harness action protocol: one model response -> one action.

A response is classified as exactly one of:

- an **environment action** (`ActionKind.ENV`): passed to the environment as is;
- a **harness action** (`ActionKind.HARNESS`): one of the BPE verbs
  `track [q]`, `commit [subgoal]`, `recall [q]`, `note [insight]`;
- **invalid** (`ActionKind.INVALID`): no action could be read; `reason` is shown to the
  policy as feedback and the step still counts against the budget.

Harness grammar (paper Appendix L): the verb (any case), optional whitespace, then a
non-empty argument in square brackets, and nothing after it: `recall [where to find egg]`,
`recall[x]`, `RECALL [x]`. No environment action starts with a verb as its first word
(`tracker [x]`, `noted` are env actions), so an action whose first word is a verb but
which breaks the grammar (`recall where is egg`, `note: x`, `track []`, `track [ ]`,
`recall [x`) was meant as a harness call and is invalid, with a reason that shows the
right form; it is never passed to the environment.

Two response formats (chosen by the environment's spec):

- `tags` (ALFWorld, WebShop): `<think>...</think><action>ACTION</action>`. The
  `<think>` part is optional. Several `<action>` blocks are accepted only if they agree.
  An unclosed `<action>` (a completion cut by the token limit) is read to the end of
  its line.
- `fenced` (WebArena): reasoning followed by one action in a triple-backtick block;
  the last block is the action.

Parsing never raises: any string (empty, huge, binary-looking, unicode) yields a
`ParsedAction`. Whether an environment action is admissible is decided by the
environment, not here.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import Enum

HARNESS_VERBS: tuple[str, ...] = ("track", "commit", "recall", "note")
MAX_RESPONSE_CHARS = 32_000  # longer responses are cut before parsing (keeps regexes linear and cheap)
MAX_ACTION_CHARS = 1_000  # an env action longer than this is invalid (no environment needs one)
MAX_ARGUMENT_CHARS = 400  # harness arguments are cut to this length, never rejected (notes and subgoals stay short)

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_ACTION_TAG = re.compile(r"<\s*(/?)\s*action\s*>", re.IGNORECASE)  # an opening or closing tag (see _action_blocks)
_ACTION_OPEN = re.compile(r"<\s*action\s*>([^\n<]*)", re.IGNORECASE)
_THINK_BLOCK = re.compile(r"<\s*think\s*>(.*?)(?:<\s*/\s*think\s*>|$)", re.IGNORECASE | re.DOTALL)
_FENCED = re.compile(r"```[ \t]*(?:[a-zA-Z_-]*[ \t]*\n)?(.*?)```", re.DOTALL)
_HARNESS = re.compile(r"^(?P<verb>track|commit|recall|note)\s*\[(?P<arg>.*)\]$", re.IGNORECASE | re.DOTALL)
# The first word is a verb (followed by anything but a letter, digit or `_`): a harness call, well formed or not.
_VERB_FIRST = re.compile(r"^(?P<verb>track|commit|recall|note)\b", re.IGNORECASE)
_VERB_USAGE = {"track": "track [object]", "commit": "commit [subgoal]", "recall": "recall [query]",
               "note": "note [insight]"}


class ActionKind(str, Enum):
    ENV = "env"
    HARNESS = "harness"
    INVALID = "invalid"


@dataclass(frozen=True)
class ParsedAction:
    """The one action read from a response."""

    kind: ActionKind
    action: str = ""  # env action string, or the harness argument (for HARNESS)
    verb: str | None = None  # harness verb (track/commit/recall/note) for HARNESS
    reason: str | None = None  # why it is invalid (shown to the policy) for INVALID
    think: str = ""  # the reasoning text, if any

    @property
    def canonical(self) -> str:
        """A normalised string used by the repeat detector and history."""
        if self.kind is ActionKind.HARNESS:
            return f"{self.verb} [{self.action}]"
        if self.kind is ActionKind.ENV:
            return self.action
        return f"{self.action} (invalid)" if self.action else "<invalid>"  # what was tried, when readable


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch)[0] != "C")


def _normalise_action(raw: str) -> str:
    action = " ".join(raw.split())
    # Models often wrap the action in quotes or backticks; none of the envs' actions start with them.
    return action.strip("`'\" ").strip()


def invalid(reason: str, think: str = "") -> ParsedAction:
    return ParsedAction(ActionKind.INVALID, reason=reason, think=think)


def _action_blocks(text: str) -> list[str]:
    """The text of every `<action>...</action>` block: each opening tag pairs with the next closing tag (opening
    tags in between belong to the block's text), as a lazy `<action>(.*?)</action>` would read them, but in one
    pass over the tags: that regex rescans the rest of the text from every unclosed `<action>` (32k characters of
    repeated `<action>` took a second)."""
    blocks, start = [], None
    for tag in _ACTION_TAG.finditer(text):
        if not tag.group(1):
            start = tag.end() if start is None else start
        elif start is not None:
            blocks.append(text[start:tag.start()])
            start = None
    return blocks


def _extract_tags(text: str) -> tuple[str | None, str | None]:
    """-> (action text or None, error reason or None)."""
    found = _action_blocks(text)
    blocks = [b for b in (_normalise_action(b) for b in found) if b]
    if not blocks:
        opened = _ACTION_OPEN.findall(text)
        if opened and _normalise_action(opened[-1]):
            return _normalise_action(opened[-1]), None
        if opened or found:
            return None, "the <action></action> block is empty"
        return None, "no <action>...</action> block found; answer as <think>...</think><action>your action</action>"
    if len(set(blocks)) > 1:
        return None, f"{len(blocks)} different <action> blocks found; give exactly one action per response"
    return blocks[0], None


def _extract_fenced(text: str) -> tuple[str | None, str | None]:
    blocks = [_normalise_action(b) for b in _FENCED.findall(text)]
    blocks = [b for b in blocks if b]
    if not blocks:
        return None, "no action found; put exactly one action inside a ``` ``` block"
    return blocks[-1], None


def parse_response(
    response: str | None,
    action_format: str = "tags",
    enabled_verbs: tuple[str, ...] | frozenset[str] = HARNESS_VERBS,
) -> ParsedAction:
    """Read the single action in `response`.

    `enabled_verbs` lists the harness verbs the current mode allows; a disabled verb is
    invalid (with a reason naming it) rather than passed to the environment.
    """
    if not isinstance(response, str) or not response.strip():
        return invalid("empty response; answer with one action")
    text = _clean(response[:MAX_RESPONSE_CHARS])
    think_match = _THINK_BLOCK.search(text)
    think = think_match.group(1).strip()[:2_000] if think_match else ""
    if action_format == "tags":
        action, error = _extract_tags(text)
    elif action_format == "fenced":
        action, error = _extract_fenced(text)
    else:
        raise ValueError(f"unknown action_format {action_format!r}; expected 'tags' or 'fenced'")
    if action is None:
        return invalid(error or "no action found", think)
    first = _VERB_FIRST.match(action)
    if first:
        verb = first.group("verb").lower()
        if verb not in enabled_verbs:
            allowed = ", ".join(enabled_verbs) if enabled_verbs else "none in this mode"
            return invalid(f"harness action '{verb}' is not available (harness actions: {allowed})", think)
        match = _HARNESS.match(action)
        if match and _trailing_text(match.group("arg")):
            return invalid(f"a harness call is one argument in brackets with nothing after it: {_VERB_USAGE[verb]}; "
                           "give an environment action in its own response", think)
        arg = " ".join(match.group("arg").split()).strip("[]'\" ")[:MAX_ARGUMENT_CHARS] if match else ""
        if not arg:
            return invalid(f"harness calls need a non-empty argument in brackets: {_VERB_USAGE[verb]}", think)
        return ParsedAction(ActionKind.HARNESS, action=arg, verb=verb, think=think)
    if len(action) > MAX_ACTION_CHARS:
        return invalid(f"action is {len(action)} characters long; at most {MAX_ACTION_CHARS} allowed", think)
    return ParsedAction(ActionKind.ENV, action=action, think=think)


def _trailing_text(arg: str) -> bool:
    """Whether the text between a call's first `[` and its last `]` closes the bracket before its end:
    `x] go to [y` (from `recall [x] go to [y]`) does, `[nested] brackets` (from `note [[nested] brackets]`) does not.
    Unbalanced brackets that never close are left to the argument."""
    depth = 1
    for i, ch in enumerate(arg):
        depth += (ch == "[") - (ch == "]")
        if depth == 0:
            return bool(arg[i + 1:].strip("] \t\n"))
    return False


def format_response(action_format: str, think: str, action: str) -> str:
    """A response in the env's format, as a teacher (or a model) writes it."""
    if action_format == "fenced":
        return f"{think}\n```\n{action}\n```"
    return f"<think>{think}</think><action>{action}</action>"


# ------------------------------------------------------------------- compact prompts

def compact_system_prompt(action_format: str, actions_label: str, verbs: tuple[str, ...] = ()) -> str:
    """A few-line system prompt for small local models (`env.prompt_style=compact`).

    It keeps the response syntax and the action vocabulary of the paper's prompts and
    drops the prose, which a model trained from scratch cannot use and which would
    otherwise be most of every training token.
    """
    if action_format == "fenced":
        syntax = "Reply with brief reasoning, then one action in a ```...``` block."
    else:
        syntax = "Reply with <think>brief reasoning</think><action>one action</action>."
    actions = f"An action is one of the {actions_label}"
    if verbs:
        actions += ", or a harness call (one step each): " + ", ".join(_VERB_USAGE[v] for v in verbs)
    return f"{syntax}\n{actions}."
