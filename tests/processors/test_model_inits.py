"""The records' constructors (``model._slot_init``) against the ``__init__`` that
``dataclass`` generated for them: the same fields set to the same values, the same
defaults and factories, ``__post_init__`` run, and a TypeError where it raised one."""
import dataclasses

import pytest

from suanli.processors import model as m

CLASSES = sorted(m._GENERATED_INITS, key=lambda c: c.__name__)
# classes whose __post_init__ reads its fields: values it can compute on
REAL = {m.Request: {"cpu": 1000, "mem": 512, "gpu_count": 1, "gpu_milli": 500}}


def test_every_frozen_record_has_the_fast_constructor():
    frozen = [c for c in vars(m).values() if isinstance(c, type) and dataclasses.is_dataclass(c)
              and c.__dataclass_params__.frozen]
    assert {c.__name__ for c in frozen} <= {c.__name__ for c in CLASSES} and len(CLASSES) >= 45
    assert all(c.__init__ is not m._GENERATED_INITS[c] for c in CLASSES)


def _build(init, cls, args=(), kwargs=None):
    obj = object.__new__(cls)
    init(obj, *args, **(kwargs or {}))
    return obj


def _slots(cls, obj) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        try:
            out[f.name] = getattr(obj, f.name)
        except AttributeError:
            out[f.name] = "<unset>"
    return out


def _required(cls) -> dict:
    if cls in REAL:
        return dict(REAL[cls])
    return {f.name: object() for f in dataclasses.fields(cls) if f.init and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING}


def _every(cls) -> dict:
    out = _required(cls)
    for f in dataclasses.fields(cls):
        if f.init and f.name not in out:
            out[f.name] = object()
    return out


def _call_both(cls, args, kwargs):
    outcomes = []
    for init in (m._GENERATED_INITS[cls], cls.__init__):
        try:
            outcomes.append(_slots(cls, _build(init, cls, args, kwargs)))
        except TypeError:
            outcomes.append(TypeError)
    return outcomes


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_constructor_sets_what_the_generated_one_sets(cls):
    fields = [f for f in dataclasses.fields(cls) if f.init]
    kw_only = all(f.kw_only for f in fields)
    for kwargs in (_required(cls), _every(cls) if cls not in REAL else _required(cls)):
        generated, fast = _call_both(cls, (), kwargs)
        assert generated is not TypeError and fast == generated
        for f in dataclasses.fields(cls):
            if f.name not in kwargs and f.default is not dataclasses.MISSING:
                assert fast[f.name] is f.default                   # the default itself
            if f.name not in kwargs and f.default_factory is not dataclasses.MISSING:
                assert type(fast[f.name]) is type(f.default_factory())
    required = _required(cls)
    for name in required:                                          # each required one missing
        assert _call_both(cls, (), {k: v for k, v in required.items() if k != name}) == [TypeError, TypeError]
    assert _call_both(cls, (), {**required, "no_such_field": 1}) == [TypeError, TypeError]
    if kw_only and fields:
        assert _call_both(cls, (object(),), {}) == [TypeError, TypeError]


def test_a_post_init_runs_and_positional_arguments_stay_positional():
    r = m.Request(4000, 1024, 2, 1000, ("A10",))
    assert (r.kind, r.gpu_total, r.models) == ("whole", 2000, ("A10",))
    assert m.Request(100, 64, 0, 0).kind == "cpu" and m.Request(100, 64, 1, 300).gpu_total == 300
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.cpu = 1                                                  # still frozen
    assert m.Candidate(node_id="a", score=1.5, rank=1) == m.Candidate(node_id="a", score=1.5, rank=1)
    assert hash(m.Candidate(node_id="a", score=1.5, rank=1)) == hash(m.Candidate(node_id="a", score=1.5, rank=1))
