"""Settings: the JSON document a chain link carries, parsed into the policy's settings
dataclass (with dacite, strictly: unknown fields, missing fields and wrong types are
refused). Every error names the setting, like the Rust SDK's:
``invalid settings: max_gpus: expected int, got str "lots"``."""

import dataclasses
import json
import typing
from typing import Any, Type, TypeVar

import dacite

S = TypeVar("S")


class SettingsError(ValueError):
    """Settings refused; the message names the offending setting. Raise it from
    ``Policy.validate`` for semantic checks."""


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or str(tp)


def _at(data: Any, path: str) -> Any:
    """The value at a dotted field path of the original document."""
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


class _NotAnInt:
    """A JSON boolean where an integer is expected (Python's ``bool`` is an ``int``)."""


def _strict_int(value: Any) -> Any:
    return _NotAnInt() if isinstance(value, bool) else value


def parse_settings(cls: Type[S], text: str) -> S:
    """Parse a settings document into ``cls`` (a dataclass); an empty document is
    ``{}``. Raises :class:`SettingsError`."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise SettingsError(f"invalid settings: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise SettingsError(
            f"invalid settings: expected a JSON object, got {type(data).__name__}"
        )
    try:
        return dacite.from_dict(cls, data, config=dacite.Config(strict=True, type_hooks={int: _strict_int}))
    except dacite.UnexpectedDataError as e:
        names = ", ".join(f"`{k}`" for k in sorted(e.keys))
        raise SettingsError(f"invalid settings: unknown field {names}") from None
    except dacite.MissingValueError as e:
        raise SettingsError(f"invalid settings: {e.field_path}: missing") from None
    except dacite.WrongTypeError as e:
        path = e.field_path or ""
        value = json.dumps(_at(data, path))
        raise SettingsError(
            f"invalid settings: {path}: expected {_type_name(e.field_type)}, got {value}"
        ) from None
    except dacite.DaciteError as e:
        raise SettingsError(f"invalid settings: {e}") from None
