"""The collector's thresholds for long-running processes (``suanli/gc_policy.py``): parsing
``SUANLI_GC_THRESHOLDS``, and each process entry point applying it (or refusing a bad
value with a message that names the variable)."""
from __future__ import annotations

import gc

import pytest

from suanli import gc_policy
from suanli.errors import ConfigError


@pytest.fixture(autouse=True)
def _restore_thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


@pytest.mark.parametrize("value", [None, "", "  "])
def test_unset_means_the_policy(value):
    assert gc_policy.thresholds_from(value) == gc_policy.THRESHOLDS


def test_default_keeps_cpythons():
    assert gc_policy.thresholds_from("default") is None
    assert gc_policy.thresholds_from(" Default ") is None


def test_three_integers():
    assert gc_policy.thresholds_from("1000, 5,0") == (1000, 5, 0)


@pytest.mark.parametrize("value", ["bad", "1,2", "1,2,3,4", "1,-2,3", "1.5,2,3", "a,b,c"])
def test_anything_else_is_refused_naming_the_variable(value):
    with pytest.raises(ConfigError, match=r"SUANLI_GC_THRESHOLDS=.*three non-negative integers"):
        gc_policy.thresholds_from(value)


def test_apply_sets_the_thresholds():
    gc.set_threshold(700, 10, 10)
    assert gc_policy.apply({}) == gc_policy.THRESHOLDS
    assert gc.get_threshold() == gc_policy.THRESHOLDS
    assert gc_policy.apply({gc_policy.ENV: "900,11,12"}) == (900, 11, 12)
    assert gc.get_threshold() == (900, 11, 12)


def test_apply_default_leaves_them_alone():
    gc.set_threshold(700, 10, 10)
    assert gc_policy.apply({gc_policy.ENV: "default"}) is None
    assert gc.get_threshold() == (700, 10, 10)


def test_the_cli_applies_it(monkeypatch, capsys):
    from suanli.cli import main

    gc.set_threshold(700, 10, 10)
    monkeypatch.delenv(gc_policy.ENV, raising=False)
    assert main(["strategy", "list"]) == 0
    assert gc.get_threshold() == gc_policy.THRESHOLDS


def test_the_cli_refuses_a_bad_value(monkeypatch, capsys):
    from suanli.cli import main

    monkeypatch.setenv(gc_policy.ENV, "lots")
    assert main(["strategy", "list"]) == 2
    assert "SUANLI_GC_THRESHOLDS='lots'" in capsys.readouterr().err


def test_a_worker_refuses_a_bad_value(monkeypatch, capsys):
    from suanli.streams.worker import main

    monkeypatch.setenv(gc_policy.ENV, "1,2")
    with pytest.raises(SystemExit) as exit_:
        main(["intake"])
    assert exit_.value.code == 2
    assert "SUANLI_GC_THRESHOLDS='1,2'" in capsys.readouterr().err


def test_a_connector_refuses_a_bad_value(monkeypatch, capsys):
    from suanli.connectors.launch import main

    monkeypatch.setenv(gc_policy.ENV, "-1,2,3")
    assert main(["sim", "--nodes", "1"]) == 2
    assert "SUANLI_GC_THRESHOLDS='-1,2,3'" in capsys.readouterr().err
