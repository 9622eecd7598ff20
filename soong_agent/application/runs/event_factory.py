"""Run events made from values the runtime produced itself, without validating them again.

A run makes about seven events a turn, each from a handful of values the loop has just computed
(ints, floats, strings, a `Usage`) whose types the loop's own code fixes. For such values
pydantic's validation is the identity: it returns the very same objects, in the model's field
order, with the given names as the fields set. `EventFactory.build` makes exactly that event
directly for the kinds of event it is told to trust (those of every turn). Their call sites are
checked by the tests instead: with `SOONG_AGENT_CHECK_EVENTS=1` in the environment (the test
suite sets it) every event made this way is validated too and must come out the same. Validating
all seven costs ~3-7 µs a turn (2-4% of the loop). The session store refuses an event holding a
value JSON cannot take (nothing of the turn is written).

What validation could change or refuse is validated as before, with its coercions and errors:
the first event of each kind of call (event class and the names given: this also builds the
class's deferred schema on the loop's thread), a value outside a literal field's values, list
and dict fields, factory defaults, and model classes with validators, private attributes or
extra fields.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from soong_agent.ports.events import RunEvent

_new = object.__new__
_set_attribute = object.__setattr__
_NONE = type(None)
_SCALARS = (str, int, float, bool, _NONE)


class _Plan(typing.NamedTuple):
    template: dict[str, Any]  # every field in order, defaults filled in
    given: set[str]
    literals: tuple[tuple[str, frozenset[Any]], ...]
    """The given literal fields: their values are checked on every call."""

    def allows(self, fields: dict[str, Any]) -> bool:
        """Whether each given literal field holds one of its values."""
        for name, values in self.literals:  # noqa: SIM110 (no generator: called per event)
            if fields[name] not in values:
                return False
        return True


CHECKED = os.environ.get("SOONG_AGENT_CHECK_EVENTS", "") not in ("", "0")
"""Validate every event made without validation too, and fail when they differ (for tests)."""


_SHARED_SETS: dict[tuple[Any, ...], set[str]] = {}
"""The `__pydantic_fields_set__` that events of one class built from the same names share. Each
event is kept for the run, and a set of its own would be one more object for the cyclic garbage
collector to go through again and again. Only frozen models share one: pydantic adds to the set
only when a field is assigned."""


class EventFactory:
    """Builds the events of runs; shared by every run (its plans depend on classes only).
    Only events of the `trusted` classes are made without validation (the few every turn
    makes, from call sites the tests all go through); every other is validated."""

    def __init__(self, trusted: Iterable[type[Any]]) -> None:
        self._trusted = frozenset(trusted)
        self._plans: dict[tuple[Any, ...], _Plan | None] = {}

    def build(self, cls: type[Any], fields: dict[str, Any]) -> RunEvent:
        """The event `cls(**fields)` makes. An event of a trusted class whose kind of call
        has been validated once is made directly, its values taken to have their fields'
        types (a literal field's value is checked); any other is validated (ValidationError)."""
        key = (cls, *fields)
        plan = self._plans.get(key, _UNSEEN)
        if plan is not None and plan is not _UNSEEN and (not plan.literals or plan.allows(fields)):
            values = plan.template.copy()
            values.update(fields)
            event: RunEvent = _new(cls)
            _set_attribute(event, "__dict__", values)
            _set_attribute(event, "__pydantic_fields_set__", plan.given)
            _set_attribute(event, "__pydantic_extra__", None)
            _set_attribute(event, "__pydantic_private__", None)
            if CHECKED:
                _check(cls, fields, event)
            return event
        event = cls.__pydantic_validator__.validate_python(fields)
        given = _SHARED_SETS.get(key)
        if given is None:
            given = event.__pydantic_fields_set__
            if cls.model_config.get("frozen"):
                _SHARED_SETS[key] = given
        else:
            _set_attribute(event, "__pydantic_fields_set__", given)
        if plan is _UNSEEN:
            trusted = cls in self._trusted
            self._plans[key] = plan_for(cls, tuple(fields), given) if trusted else None
        return event


_UNSEEN: Any = object()


def plan_for(cls: type[Any], names: tuple[str, ...], given: set[str]) -> _Plan | None:
    """How to make `cls` from these field names without validation; None when it must always
    be validated (validators, private attributes, extra fields kept, a constrained field, a
    default made by a factory or validated, a field type other than scalars, literals and
    models)."""
    if not issubclass(cls, BaseModel) or not cls.__pydantic_complete__:
        return None
    config = cls.model_config
    if not config.get("frozen"):
        return None  # (the fields set is shared)
    decorators = cls.__pydantic_decorators__
    if (
        config.get("extra") == "allow"
        or config.get("validate_default")
        or config.get("strict")
        or cls.__private_attributes__
        or cls.__pydantic_post_init__ is not None
        or decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or decorators.model_validators
    ):
        return None
    fields = cls.model_fields
    if any(name not in fields for name in names):
        return None  # unknown: validation says which
    template: dict[str, Any] = {}
    literals: list[tuple[str, frozenset[Any]]] = []
    for name, info in fields.items():
        if info.metadata or info.validate_default:
            return None
        if name in names:
            kinds = _kinds(info.annotation)
            if kinds is None:
                return None
            if kinds[1] is not None:
                literals.append((name, kinds[1]))
        elif info.default_factory is not None or type(info.default) not in _SCALARS:
            return None  # a fresh default each time (or a copy), or a required field missing
        template[name] = info.default if name not in names else None
    return _Plan(template, given, tuple(literals))


def _check(cls: type[Any], fields: dict[str, Any], event: RunEvent) -> None:
    """Raise TypeError when validating `fields` would not make exactly `event`."""
    validated = cls.__pydantic_validator__.validate_python(dict(fields))
    made, wanted = event.__dict__, validated.__dict__
    if list(made) != list(wanted) or any(
        type(made[name]) is not type(value) or made[name] != value for name, value in wanted.items()
    ):
        raise TypeError(
            f"{cls.__name__} made without validation differs from the validated event: "
            f"{made!r} != {wanted!r}"
        )


def _kinds(annotation: Any) -> tuple[tuple[type[Any], ...], frozenset[Any] | None] | None:
    """The types `annotation` allows, each a value of which validation keeps as it is, and
    the literal values it may take; None for any other annotation."""
    if annotation in _SCALARS:
        return (annotation,), None
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        if not all(type(v) in (str, int, bool) for v in values):
            return None
        return tuple({type(v) for v in values}), frozenset(values)
    if origin in (types.UnionType, typing.Union):
        allowed: list[type[Any]] = []
        literals: set[Any] | None = None
        parts = [_kinds(arg) for arg in typing.get_args(annotation)]
        if any(part is None for part in parts):
            return None
        for part in parts:
            assert part is not None
            part_types, part_literals = part
            allowed.extend(part_types)
            if part_literals is not None:
                literals = (literals or set()) | part_literals
        if literals is not None:
            if set(allowed) - {str, int, bool, _NONE}:
                return None  # a literal beside a free type: not checked here
            if _NONE in allowed:
                literals.add(None)
        return tuple(dict.fromkeys(allowed)), frozenset(literals) if literals is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation.model_config.get("revalidate_instances", "never") != "never":
            return None
        return (annotation,), None
    return None
