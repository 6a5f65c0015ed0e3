"""Versioned strategies: a config names its version; replay pins the recorded one."""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Literal

import pytest

from suanli.errors import StrategyConfigError
from suanli.processors.args import arg
from suanli.processors.strategies import (MODULES, get_strategy, pinned_versions, register, versions)
from suanli.processors.strategies._baseline import NormalisedBaselineArgs, baseline_profile, normalisers


@dataclass(frozen=True, slots=True)
class _Args(NormalisedBaselineArgs):
    version: Literal["1.0.0", "2.0.0"] = arg("2.0.0", "which version")


def _build(args: _Args):
    # the two versions build different profiles
    return baseline_profile("BestFit" if args.version == "1.0.0" else "BestFitRaw", args,
                            normalisers(args) if args.version == "1.0.0" else None)


@pytest.fixture(scope="module")
def versioned() -> str:
    name = "versioned-for-tests"
    if name not in MODULES:
        register(types.SimpleNamespace(NAME=name, VERSION="2.0.0", VERSIONS=("1.0.0", "2.0.0"), Args=_Args,
                                       build=_build, __doc__="test strategy"))
    return name


def test_a_config_names_its_version_and_the_newest_is_the_default(versioned):
    assert versions(versioned) == ("1.0.0", "2.0.0")
    assert get_strategy(versioned, {}).version == "2.0.0"
    old = get_strategy(versioned, {"version": "1.0.0"})
    assert old.version == "1.0.0" and old.ref()["version"] == "1.0.0"
    assert [p.name for p, _ in old.profile.scorers] == ["BestFit"]
    with pytest.raises(StrategyConfigError):
        get_strategy(versioned, {"version": "3.0.0"})


def test_a_pin_applies_to_configs_without_a_version_and_only_inside_its_block(versioned):
    with pinned_versions({versioned: "1.0.0"}):
        pinned = get_strategy(versioned, {})
        assert pinned.version == "1.0.0" and [p.name for p, _ in pinned.profile.scorers] == ["BestFit"]
        assert get_strategy(versioned, {"version": "2.0.0"}).version == "2.0.0"     # named wins
    assert get_strategy(versioned, {}).version == "2.0.0"
    with pytest.raises(StrategyConfigError, match="cannot build version"):
        with pinned_versions({versioned: "0.9.0"}):
            pass


def test_an_unversioned_strategy_has_one_version_and_ignores_pins():
    assert versions("bestfit") == (get_strategy("bestfit", {}).version,)
    with pinned_versions({"bestfit": versions("bestfit")[0]}):
        assert get_strategy("bestfit", {}).version == versions("bestfit")[0]
