"""A fast path through TextWorld's PDDL engine: the same engine and the same text, without its repeated work.

    with fast_path.active(True):      # what AlfworldEnv does around every engine call (env.alfworld.fast_path)
        state = engine.step("go to shelf 1")

TextWorld (1.7.0) spends most of an ALFWorld step redoing work whose result cannot change:

- `textgen.ContextSensitiveGrammar.derive` parses its start string with tatsu on every call
  (each admissible command's template, each feedback rule, on every step), and the grammar's
  rules are parsed again for every game loaded;
- `Rule.parse_conjunctive_query` parses each rule condition on every `replace` and `query`;
- `copy_context` and `Symbol.copy` deep-copy the derivation context (entity infos, variables,
  placeholders) where nothing downstream mutates what they copy;
- every reset translates the game's PDDL to SAS twice (`fast_downward.pddl2sas`), the same
  translation for every reset of the same game, and every load parses the game's grammar file;
- every load copies the planner's 33 MB shared library to a temporary file and loads that copy
  (`fast_downward.load_lib`), never to be unloaded, though each reset loads a whole new problem
  into the library anyway.

The fast path replaces exactly those functions while active: parses are memoized (bounded LRU
caches keyed on the input text) and handed out as fresh copies where the engine mutates them;
contexts are copied one level deep (the engine only reassigns or `update`s their dicts and
reads the entities); the PDDL translation is memoized per game, and the grammar file is parsed once
per domain (games differ only inside its quoted blocks, which are put back per game);
an environment that loads one game after another keeps one planner library (`Planner`) for all
of them, as its engine's resets do for one game.
Everything else (the planner library, the state, applicable actions, the grammar's choices) is
TextWorld's own, so observations, admissible commands and `won` are byte-identical
(tests/envs/test_alfworld_fast_path.py checks thousands of steps on and off).

The replacements are written against the pinned versions (`PINNED`); with any other version
installed the fast path turns itself off with one warning and the engine runs unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import re
import threading
from typing import Any, Callable, Iterator

PINNED = {"textworld": "1.7.0", "tatsu": "5.8.3", "fast-downward-textworld": "20.6.4"}
CACHE_SIZE = 4096  # distinct strings a parse cache holds (ALFWorld's grammar has a few hundred)
GAME_CACHE_SIZE = 64  # games whose PDDL translation and grammar file parse are kept (a few MB each at most)

log = logging.getLogger(__name__)
_lock = threading.Lock()
_depth = 0  # nesting of active(True) blocks (the originals are restored when the outermost one exits)
_originals: list[tuple[Any, str, Any]] = []  # (owner, attribute, original value) while installed
_supported: bool | None = None
_planner: "Planner | None" = None  # the library holder of the innermost active block


class Planner:
    """One copy of fast-downward's library, reused by every engine one environment loads (one at a time)."""

    def __init__(self) -> None:
        self.lib: Any = None


def supported() -> bool:
    """Whether the installed engine is the pinned one (warns once when it is not)."""
    global _supported
    if _supported is None:
        found = {}
        for name in PINNED:
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                found[name] = None
        off = {name: v for name, v in found.items() if v != PINNED[name]}
        _supported = not off
        if off:
            got = ", ".join(f"{name} {v or 'missing'} (pinned {PINNED[name]})" for name, v in off.items())
            log.warning("ALFWorld fast path off: %s; the engine runs unchanged (slower). "
                        "Install the pinned versions, or set env.alfworld.fast_path=false to silence this.", got)
    return _supported


@contextlib.contextmanager
def active(enabled: bool = True, planner: Planner | None = None) -> Iterator[bool]:
    """Run the block with the fast path on (`enabled` and supported) or off; yields whether it is on.

    `planner`: engines started in the block take their library from it (loaded there the first time);
    without one each engine loads its own copy, as TextWorld does. Blocks nest; an `active(False)`
    inside an `active(True)` runs the engine's own functions.
    """
    global _depth, _planner
    if not (enabled and supported()):
        with _lock:
            saved = list(_originals) if _depth else []
            if saved:
                _restore()
        try:
            yield False
        finally:
            if saved:
                with _lock:
                    _install()
        return
    with _lock:
        if _depth == 0 or not _originals:
            _install()
        _depth += 1
        outer_planner, _planner = _planner, planner
    try:
        yield True
    finally:
        with _lock:
            _depth -= 1
            _planner = outer_planner
            if _depth == 0:
                _restore()


def clear_caches() -> None:
    """Empty every memo (the tests compare cold and warm caches)."""
    for cached in (_parse_symbols, _parse_query, _pddl2sas, _parse_skeleton):
        cached.cache_clear()


# ------------------------------------------------------------------------------------------------ replacements


def _install() -> None:
    import fast_downward
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    _patch(textgen, "_parse_and_convert", _symbols_copy)
    _patch(textgen, "copy_context", _copy_context)
    _patch(textgen.Symbol, "copy", _symbol_copy)
    _patch(textgen.ContextSensitiveGrammar, "replace", _replace)
    _patch(Rule, "parse_conjunctive_query", classmethod(lambda cls, expr: _parse_query(expr)))
    _patch(fast_downward, "pddl2sas", _pddl2sas_shared)
    _patch(fast_downward, "load_lib", _load_lib)
    _patch(pddl_logic, "_parse_and_convert", _game_logic_parse)


def _patch(owner: Any, name: str, value: Any) -> None:
    _originals.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
    setattr(owner, name, value)


def _restore() -> None:
    while _originals:
        owner, name, value = _originals.pop()
        setattr(owner, name, value)


def _original(owner: Any, name: str) -> Callable:
    """The engine's own function behind a patch (for the memos' first call)."""
    for patched_owner, patched_name, value in _originals:
        if patched_owner is owner and patched_name == name:
            return value
    return getattr(owner, name)


# -- textgen: symbols, contexts, replace


def _clone(symbol: Any) -> Any:
    """A copy of a parsed symbol tree that shares strings and contexts (neither is mutated in place)."""
    if isinstance(symbol, list):
        return [_clone(s) for s in symbol]
    copy = object.__new__(type(symbol))
    copy.__dict__ = dict(symbol.__dict__)
    for key in ("expression", "symbol"):  # ConditionalSymbol.expression, ListSymbol.symbol
        value = copy.__dict__.get(key)
        if value is not None and not isinstance(value, str):
            copy.__dict__[key] = _clone(value)
    return copy


@functools.lru_cache(maxsize=CACHE_SIZE)
def _parse_symbols(text: str, rule_name: str) -> Any:
    from textworld.envs.pddl import textgen

    return _original(textgen, "_parse_and_convert")(text, rule_name=rule_name)


def _symbols_copy(text: str, rule_name: str = "symbols", trace: bool = False, **kwargs: Any) -> Any:
    if trace or kwargs:  # TW_CSG_TRACE prints tatsu's trace: parse for real
        from textworld.envs.pddl import textgen

        return _original(textgen, "_parse_and_convert")(text, rule_name=rule_name, trace=trace, **kwargs)
    return _clone(_parse_symbols(text, rule_name))


def _copy_context(context: dict) -> dict:
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _symbol_copy(self: Any, context: dict) -> Any:
    copy = _clone(self)
    copy.context = _copy_context(context)
    return copy


def _replace(self: Any, start: Any) -> list:
    """ContextSensitiveGrammar.replace with memoized conditions and light copies (same choice of rule)."""
    from textworld.envs.pddl.textgen import CSGUnknownSymbolError

    rules = self._rules.get(str(start))
    if not rules:
        raise CSGUnknownSymbolError(start)
    for rule in rules:  # the first applicable rule: the engine filters them all, then takes the first
        if not rule.condition:
            break
        query = _parse_query(rule.condition)
        if next(iter(start.context["state"].all_assignments(query, start.context["mapping"])), None) is not None:
            break
    else:
        raise IndexError("list index out of range")  # the engine's own error when no rule applies
    symbols = _clone(rule.rhs)
    for symbol in symbols:
        symbol.context = _copy_context(start.context)
    return symbols


# -- logic: rule conditions


@functools.lru_cache(maxsize=CACHE_SIZE)
def _parse_query(expr: str) -> Any:
    from textworld.logic import Rule

    return _original(Rule, "parse_conjunctive_query").__func__(Rule, expr)


# -- per game: PDDL translation and the grammar file


@functools.lru_cache(maxsize=GAME_CACHE_SIZE)
def _pddl2sas(domain: str, problem: str, verbose: bool, optimize: bool) -> Any:
    import fast_downward

    return _original(fast_downward, "pddl2sas")(domain, problem, verbose=verbose, optimize=optimize)


def _pddl2sas_shared(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
    # The translated task is only read (PddlState takes its actions, types, objects and initial facts).
    return _pddl2sas(domain, problem, verbose, optimize)


def _load_lib() -> Any:
    import fast_downward

    load = _original(fast_downward, "load_lib")
    if _planner is None:
        return load()
    if _planner.lib is None:
        _planner.lib = load()
    return _planner.lib


# The grammar file's strBlock token (textworld/envs/pddl/logic/logic.ebnf). Games of one domain differ only inside
# these blocks (the task text), so the document is parsed once with every block replaced by its number, and each game's
# blocks are put back as the converter reads them. (A comment holding three quotes would break this; ALFWorld's has none.)
_STR_BLOCK = re.compile(r'"""(?:.|\n)*?"""')


@functools.lru_cache(maxsize=GAME_CACHE_SIZE)
def _parse_skeleton(skeleton: str, rule_name: str) -> Any:
    from textworld.envs.pddl import logic as pddl_logic

    return pddl_logic._PARSER.parse(skeleton, rule_name=rule_name)


def _game_logic_parse(text: str, rule_name: str = "pddlStart", **kwargs: Any) -> Any:
    from textworld.envs.pddl import logic as pddl_logic

    if kwargs:
        return _original(pddl_logic, "_parse_and_convert")(text, rule_name=rule_name, **kwargs)
    blocks = _STR_BLOCK.findall(text)
    numbers = iter(range(len(blocks)))
    skeleton = _STR_BLOCK.sub(lambda _: f'"""{next(numbers)}"""', text)

    class BlockConverter(pddl_logic._ModelConverter):
        def _unescape_block(self, string: str) -> str:
            return super()._unescape_block(blocks[int(string[3:-3])])

    return BlockConverter().walk(_parse_skeleton(skeleton, rule_name))
