"""recordtype: records built without compiling code behave as the dataclasses they replaced."""

import copy
import pickle

import pytest

from nfsreaddir.model.listing import Listing
from nfsreaddir.recordtype import as_dict, field, record


@record
class Phase:
    name: str
    end: int | None = None
    attrs: dict = field(default_factory=dict)
    rows: list = field(default_factory=list, repr=False)


@record(slots=True)
class Slotted:
    a: int
    b: list = field(default_factory=list)


def test_arguments_by_position_and_name_with_defaults_made_anew():
    p, q = Phase("fill"), Phase(name="fill", end=3)
    assert (p.name, p.end, p.attrs, q.end) == ("fill", None, {}, 3)
    p.attrs["k"] = 1
    assert q.attrs == {} and Phase("x").attrs == {}  # each its own dict
    assert as_dict(q) == {"name": "fill", "end": 3, "attrs": {}, "rows": []}


@pytest.mark.parametrize(
    "args, kw, says",
    [
        ((), {}, "missing required argument 'name'"),
        (("a",), {"name": "b"}, "multiple values for argument 'name'"),
        (("a",), {"nonesuch": 1}, "unexpected keyword argument 'nonesuch'"),
        (("a", 1, {}, [], 5), {}, "takes 4 positional arguments, 5 given"),
    ],
)
def test_wrong_arguments_are_a_type_error(args, kw, says):
    with pytest.raises(TypeError, match=says):
        Phase(*args, **kw)


def test_a_field_without_default_after_one_with_is_refused():
    with pytest.raises(TypeError, match="without a default after one with"):

        @record
        class Bad:
            a: int = 0
            b: int


def test_equal_by_value_unhashable_and_shown_with_its_fields():
    assert Phase("a", 1) == Phase("a", 1) and Phase("a", 1) != Phase("a", 2)
    assert Phase("a") != ("a", None, {}, [])
    p = Phase("a", float("nan"))
    assert p == p  # (as a dataclass's tuples compare: a field is equal to itself first)
    with pytest.raises(TypeError):
        hash(Phase("a"))
    assert repr(Phase("a", 2, rows=[1])) == "Phase(name='a', end=2, attrs={})"  # rows: repr=False


def test_slots_have_no_dict_and_copy_and_pickle_whole():
    s = Slotted(1)
    assert not hasattr(s, "__dict__")
    with pytest.raises(AttributeError):
        s.c = 2  # type: ignore[attr-defined]
    s.b.append(3)
    assert copy.copy(s) == s and pickle.loads(pickle.dumps(s)) == s
    lst = Listing(pid=1, comm="ls", dev=2, fileid=3, start=0, end=1)
    again = pickle.loads(pickle.dumps(lst))
    assert again.comm == "ls" and again.restarts == [] and not hasattr(lst, "__dict__")
