"""``suanli policy set``: the policy is checked before anything is stored (no services)."""
from __future__ import annotations

import json

import pytest

from suanli.cli_policy import policy_event
from suanli.errors import StrategyConfigError


def test_a_valid_policy_becomes_its_event_with_canonical_json():
    e = policy_event("c1", "default", {"prewarm": {"enabled": True}, "profiles": {"enabled": True}}, 5, "me")
    assert e["cell"] == "c1" and e["strategy"] == "default" and e["at"] == 5 and e["changed_by"] == "me"
    assert json.loads(e["config_json"]) == {"prewarm": {"enabled": True}, "profiles": {"enabled": True}}
    assert e["config_json"] == '{"prewarm":{"enabled":true},"profiles":{"enabled":true}}'


@pytest.mark.parametrize("strategy, config, named", [
    ("default", {"profiles": {"enabld": True}}, "profiles.enabld"),
    ("default", {"prewarm": {"max_waste": 2}}, "max_waste"),
    ("no-such", {}, "no-such"),
])
def test_a_bad_policy_is_refused_naming_what_is_wrong(strategy, config, named):
    with pytest.raises(StrategyConfigError, match=named.replace(".", r"\.")):
        policy_event("c1", strategy, config, 0, "me")
