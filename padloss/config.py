"""padloss's settings, in one place.

Each setting comes from its environment variable, read once, when padloss is
first imported; :func:`set` changes it at run time (also as a ``with`` block
that puts the old values back), as scipy.fft's ``set_backend`` and numbagg's
``_set_cache`` do. Editing ``os.environ`` afterwards changes nothing until
:func:`reload`. Readers look a value up as an attribute of :data:`current`
(the backend is looked up on every call: an attribute read costs ~30 ns).

``SETTINGS`` is the table; the README's is checked against :func:`table`.
"""
from __future__ import annotations

import os
import types
from typing import Any, Callable, NamedTuple


class Setting(NamedTuple):
    name: str
    variable: str
    default: Any
    parse: Callable[[str], Any]            # the variable's text -> the value
    check: Callable[[Any], bool]           # whether a value given to set() is one
    effect: str                            # when a change takes effect
    doc: str


def _text_or_none(text: str) -> str | None:
    return text or None


def _not_zero(text: str) -> bool:
    return text != "0"


def _one(text: str) -> bool:
    return text.strip() == "1"


def _str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _path_or_none(value: Any) -> bool:
    return value is None or isinstance(value, (str, os.PathLike))


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _target(value: Any) -> bool:
    from .npu_targets import TARGETS

    return value in TARGETS


SETTINGS = (
    Setting("backend", "PADLOSS_BACKEND", None, _text_or_none, _str_or_none, "the next call",
            "backend for calls that name none outside a `use_backend()` block; unset: automatic"),
    Setting("numba_cache", "PADLOSS_NUMBA_CACHE", True, _not_zero, _bool,
            "when the Numba backend loads (the first call)",
            "compiled kernels persist on disk; `0` keeps them in memory"),
    Setting("cache_dir", "PADLOSS_CACHE_DIR", None, _text_or_none, _path_or_none,
            "the next kernel saved or loaded",
            "folder of compiled kernels; unset: `$XDG_CACHE_HOME/padloss` or `~/.cache/padloss`"),
    Setting("cache_trusted", "PADLOSS_CACHE_TRUSTED", False, _one, _bool,
            "the next kernel saved or loaded",
            "`1` uses a compile cache folder that others can write (its files are machine code)"),
    Setting("target", "PADLOSS_TARGET", "spec", str.strip, _target, "the next call",
            "the Ascend product whose refusals and numerics calls reproduce (docs/targets.md); "
            "`spec`: the contract, no product's limits"),
    Setting("ascend_aclnn", "PADLOSS_ASCEND_ACLNN", True, _not_zero, _bool,
            "plans built after the change", "call CANN's native circular-pad kernel when it "
                                             "exists; `0` keeps the torch-ops path"),
)
_BY_NAME = {s.name: s for s in SETTINGS}

current = types.SimpleNamespace()   # name -> value, for readers


def _from_environment(setting: Setting) -> Any:
    text = os.environ.get(setting.variable)
    return setting.default if text is None else setting.parse(text)


def reload() -> None:
    """Read every setting from the environment again (tests, or after os.environ edits)."""
    for setting in SETTINGS:
        setattr(current, setting.name, _from_environment(setting))


class _Previous:
    """What :func:`set` returns: as a ``with`` block, it restores the values it replaced."""

    def __init__(self, values: dict[str, Any]):
        self.values = values

    def __enter__(self) -> "_Previous":
        return self

    def __exit__(self, *exc_info) -> None:
        for name, value in self.values.items():
            setattr(current, name, value)


def set(**values: Any) -> _Previous:  # noqa: A001  (the module's verb, as scipy.fft.set_backend)
    """Change settings by name (``padloss.config.set(backend="numba")``); every
    name and value is checked before any is changed."""
    for name, value in values.items():
        setting = _BY_NAME.get(name)
        if setting is None:
            raise TypeError(f"padloss.config.set: unknown setting {name!r}; known: {', '.join(_BY_NAME)}")
        if not setting.check(value):
            raise TypeError(f"padloss.config.set: {name}={value!r} is not a valid value "
                            f"({setting.doc})")
    previous = {name: getattr(current, name) for name in values}
    for name, value in values.items():
        setattr(current, name, value)
    return _Previous(previous)


def settings() -> dict[str, Any]:
    """The current value of every setting."""
    return {s.name: getattr(current, s.name) for s in SETTINGS}


def table() -> str:
    """The settings as the README's Markdown table."""
    rows = ["| variable | `padloss.config` | default | takes effect | meaning |",
            "|---|---|---|---|---|"]
    for s in SETTINGS:
        default = "unset" if s.default is None else f"`{s.default}`"
        rows.append(f"| `{s.variable}` | `{s.name}` | {default} | {s.effect} | {s.doc} |")
    return "\n".join(rows)


reload()
