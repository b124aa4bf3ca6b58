"""Records: mutable classes declared by their annotated fields, as dataclasses are, whose
methods (__init__, __repr__, __eq__) are made without compiling code.

dataclasses writes each class's methods as source text and compiles it at every start of the
process: for the 13 classes on the path of `check`, 42 M of the 510 M instructions a check of
a small trace ran, more than reading and judging the trace. A record's methods are the same
few functions for every class, reading the class's table of fields. An immutable record is a
NamedTuple (events.py); these are the ones that are filled in or changed after they are made.

    @record
    class Phase:
        name: str
        end: int | None = None
        attrs: dict = field(default_factory=dict)

Phase("fill", end=3) is Phase(name="fill", end=3, attrs={}); the arguments are checked as a
dataclass's are (TypeError for one missing, unknown or given twice). @record(slots=True): the
instances have no __dict__ (a listing is made for each of a capture's tens of thousands).
mypy knows the fields and the constructor's signature (typing.dataclass_transform)."""

from itertools import repeat
from typing import Any, NamedTuple, dataclass_transform

_NONE = object()  # no default


class _Field(NamedTuple):
    default: Any
    factory: Any
    repr: bool


def field(*, default=_NONE, default_factory=_NONE, repr=True) -> Any:
    """A field's default made anew for each record (default_factory), or a field left out of
    the record's repr."""
    return _Field(default, default_factory, repr)


def names(of):
    """The field names of a record or record class, in their order."""
    return tuple(of.__record_fields__)


def as_dict(obj):
    """{field: value} of a record, in the fields' order (the values as they are, not copied)."""
    return {n: getattr(obj, n) for n in obj.__record_fields__}


@dataclass_transform(field_specifiers=(field,))
def record(cls=None, *, slots=False):
    """The class as a record (see the module's docstring)."""
    if cls is None:
        return lambda c: _made(c, slots)
    return _made(cls, slots)


def _made(cls, slots):
    fields = {}  # name -> _Field: a base record's first, then the class's own (as a dataclass)
    for base in reversed(cls.__mro__[1:]):
        fields.update(base.__dict__.get("__record_fields__", {}))
    inherited = set(fields)
    for name in cls.__dict__.get("__annotations__", {}):
        given = cls.__dict__.get(name, _NONE)
        f = given if isinstance(given, _Field) else _Field(given, _NONE, True)
        if not _defaulted(f) and any(_defaulted(g) for g in fields.values()):
            raise TypeError(f"{cls.__name__}.{name}: a field without a default after one with")
        fields[name] = f
        if f.factory is not _NONE:
            delattr(cls, name)  # (a plain default stays a class attribute, as in a dataclass)
    cls.__record_fields__ = fields
    cls.__init__ = _init(cls.__name__, fields, slots)
    cls.__repr__ = _repr
    cls.__eq__ = _eq
    cls.__hash__ = None  # (mutable and compared by value: unhashable, as a dataclass is)
    if not slots:
        return cls
    body = {k: v for k, v in cls.__dict__.items() if k not in fields}
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    own = tuple(n for n in fields if n not in inherited)
    made = type(cls)(cls.__name__, cls.__bases__, dict(body, __slots__=own))
    made.__qualname__ = cls.__qualname__
    return made


def _defaulted(f):
    return f.default is not _NONE or f.factory is not _NONE


_MADE = object()  # in the table of a record's values: made by the field's default_factory


def _init(name, fields, slots):
    """__init__ of a record of these fields: the arguments laid over a table of the defaults in
    the fields' order (a dict's update, in C), then the factories called. 1.4 us for a record
    of 6 fields (a dataclass's compiled __init__: 0.3 us), 4.8 us for a listing's 33: at most
    a few tenths of a second for a capture's hundred thousand listings or restarts."""
    order = tuple(fields)
    table = {n: f.default if f.factory is _NONE else _MADE for n, f in fields.items()}
    required = tuple(n for n, f in fields.items() if f.default is f.factory is _NONE)
    made = tuple((n, f.factory) for n, f in fields.items() if f.factory is not _NONE)

    def __init__(self, *args, **kw):
        values = table.copy()
        if args:
            if len(args) > len(order):
                raise TypeError(
                    f"{name}() takes {len(order)} positional arguments, {len(args)} given"
                )
            if kw and (twice := kw.keys() & order[: len(args)]):
                raise TypeError(f"{name}() got multiple values for argument {min(twice)!r}")
            values.update(zip(order, args))
        values.update(kw)
        if len(values) != len(order):
            unknown = next(k for k in kw if k not in table)
            raise TypeError(f"{name}() got an unexpected keyword argument {unknown!r}")
        for n in required:
            if values[n] is _NONE:
                raise TypeError(f"{name}() missing required argument {n!r}")
        for n, factory in made:
            if values[n] is _MADE:
                values[n] = factory()
        if slots:  # (each set in C: map over setattr, which returns None for any() to pass)
            any(map(setattr, repeat(self), values, values.values()))
        else:  # (in the fields' order: vars() of a record is its fields' dict, as a dataclass's)
            self.__dict__.update(values)

    return __init__


def _repr(self):
    shown = ", ".join(
        f"{n}={getattr(self, n)!r}" for n, f in self.__record_fields__.items() if f.repr
    )
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    # (tuples, as a dataclass compares: a field is equal to itself first, NaN included)
    mine = tuple(getattr(self, n) for n in self.__record_fields__)
    return mine == tuple(getattr(other, n) for n in self.__record_fields__)
