"""Reservations (#15) in the human forms: the task form's ``reservation`` field and the bid
form of ``suanli reserve``."""
from datetime import datetime, timezone

import pytest
import yaml

from suanli.errors import ValidationError
from suanli.schemas.task_spec import bid_from_document, task_from_document, time_ms

BASE = {"resources": {"cpu": 1, "memory": "1Gi", "gpu": 1}}
NOW = 1_900_000_000_000
H = 3_600_000


# ------------------------------------------------------------------ the task form
@pytest.mark.parametrize("ref", ["rsv-b-1", "b-1"])
def test_reservation_becomes_the_label(ref):
    event = task_from_document({**BASE, "reservation": ref, "labels": {"team": "x"}}, 0)
    assert event["labels"] == {"team": "x", "reservation": ref}


def test_the_same_label_given_twice_is_fine_and_a_contradiction_is_refused():
    assert task_from_document({**BASE, "reservation": "rsv-1", "labels": {"reservation": "rsv-1"}}, 0)["labels"] == \
        {"reservation": "rsv-1"}
    with pytest.raises(ValidationError, match="contradicts"):
        task_from_document({**BASE, "reservation": "rsv-1", "labels": {"reservation": "rsv-2"}}, 0)
    with pytest.raises(ValidationError, match="reservation"):
        task_from_document({**BASE, "reservation": "no spaces please"}, 0)
    assert "reservation" not in task_from_document(BASE, 0)["labels"]


# ------------------------------------------------------------------ times
@pytest.mark.parametrize("value, expected", [
    ("now", NOW), ("+10m", NOW + 600_000), ("+1h30m", NOW + 5_400_000), ("+ 2h", NOW + 2 * H),
    (NOW + 5, NOW + 5), (str(NOW + 7), NOW + 7),
    ("2030-06-01T08:00:00Z", 1_906_531_200_000), ("2030-06-01T08:00:00", 1_906_531_200_000),
    ("2030-06-01T10:00:00+02:00", 1_906_531_200_000),
    (datetime(2030, 6, 1, 8, tzinfo=timezone.utc), 1_906_531_200_000),
])
def test_times_absolute_relative_and_yaml_timestamps(value, expected):
    assert time_ms(value, NOW) == expected


@pytest.mark.parametrize("value", ["tomorrow", "-10m", "+10", True, -1, "2030-13-01T00:00:00Z"])
def test_bad_times_are_refused(value):
    with pytest.raises(ValueError):
        time_ms(value, NOW)


# ------------------------------------------------------------------ the bid form
BID_YAML = """\
id: b-train-1
tenant: vision
cell: openb
gpus: 4
gpu_model: A100
cpu: 16
memory: 64Gi
start: +10m
latest_start: 2030-03-17T20:00:00Z
duration: 4h
price: 2.5
gang: false
"""


def test_the_bid_form_from_yaml():
    event = bid_from_document(yaml.safe_load(BID_YAML), NOW)
    assert event["event_id"].startswith("bid/b-train-1/")
    assert {k: v for k, v in event.items() if k != "event_id"} == {
        "bid_id": "b-train-1", "tenant": "vision", "cell": "openb",
        "resources": {"cpu_milli": 16000, "memory_mib": 65536, "gpu_count": 4, "gpu_milli": 1000,
                      "gpu_models": ["A100"], "gpu_memory_mib": 0, "accelerators": []},
        "start_at": NOW + 600_000, "duration_ms": 4 * H, "price": 2.5, "at": NOW,
        "latest_start_at": 1_900_008_000_000, "gang": False}


def test_bid_form_defaults_and_alternatives():
    event = bid_from_document({"gpus": 1, "gpu_memory": "80Gi", "gpu_models": ["H100", "H800"], "cpu_milli": 500,
                               "memory_mib": 100, "start": "now", "duration_ms": 60_000, "price": 0}, NOW)
    assert event["bid_id"].startswith("bid-") and event["tenant"] == "default" and event["cell"] == "openb"
    assert event["latest_start_at"] is None and event["gang"] is True and event["start_at"] == NOW
    assert event["resources"]["gpu_memory_mib"] == 81920 and event["resources"]["gpu_models"] == ["H100", "H800"]
    assert (event["resources"]["cpu_milli"], event["resources"]["memory_mib"]) == (500, 100)


@pytest.mark.parametrize("change, says", [
    ({"gpus": 0}, "gpus: a reservation holds whole GPUs: give at least 1"),
    ({"gpus": 0.5}, "gpus: a reservation holds whole GPUs, not a share"),
    ({"gpus": 2.5}, "not a share"),
    ({"gpus": 100}, "more than 64"),
    ({"latest_start": "+5m"}, "latest_start: 2030-03-17T17:51:40Z is before the earliest start"),
    ({"duration": "0m"}, "duration: the window must be longer than 0"),
    ({"duration": "soon"}, "duration: duration 'soon'"),
    ({"duration": None}, "duration: give the window's length"),
    ({"price": -1}, "price: -1.0 is negative"),
    ({"price": float("nan")}, "price"),
    ({"start": "whenever"}, "start: 'whenever'"),
    ({"start": None}, "start: give the earliest start"),
    ({"gpu_memory": "big"}, "gpu_memory"),
    ({"cpu": None}, "give cpu"),
    ({"id": "has space"}, "id"),
    ({"gang": "maybe"}, "gang"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_bids_are_refused_naming_the_field(change, says):
    doc = {**yaml.safe_load(BID_YAML), **change}
    doc = {k: v for k, v in doc.items() if v is not None or k in ("start",)}
    if change.get("start", 1) is None:
        doc.pop("start")
    with pytest.raises(ValidationError) as err:
        bid_from_document(doc, NOW)
    assert says in str(err.value) and str(err.value).startswith("invalid bid: ")


def test_every_problem_is_named_at_once():
    with pytest.raises(ValidationError) as err:
        bid_from_document({**yaml.safe_load(BID_YAML), "gpus": 0, "price": -2, "latest_start": "now"}, NOW)
    said = str(err.value)
    assert "gpus:" in said and "price:" in said and "latest_start:" in said


def test_a_bid_document_must_be_a_mapping():
    with pytest.raises(ValidationError, match="mapping"):
        bid_from_document(["gpus", 1], NOW)
