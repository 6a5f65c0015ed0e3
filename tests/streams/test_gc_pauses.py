"""GcPauses: the collector's pauses per generation, from gc.callbacks (no services)."""
import gc

from suanli.streams.gc_pauses import GcPauses


def test_every_collection_is_counted_under_its_generation_until_uninstalled():
    pauses = GcPauses().install()
    try:
        pauses.install()                                   # idempotent: one callback
        assert gc.callbacks.count(pauses._on_collect) == 1
        before = list(pauses.count)
        junk = [[i] for i in range(50_000)]                # tracked objects for a full collection to scan
        for item in junk:
            item.append(item)                              # cycles: garbage only the collector frees
        del junk, item
        gc.collect(2)
        gc.collect(0)
        assert pauses.count[2] >= before[2] + 1 and pauses.count[0] >= before[0] + 1   # and any automatic ones
        assert 0 < pauses.max_ms[2] <= pauses.total_ms[2]
        report = pauses.as_json()
        assert set(report) == {"0", "1", "2", "freezes", "frozen"} and report["2"]["count"] == pauses.count[2]
        assert report["freezes"] == 0                      # no freezing unless asked
    finally:
        pauses.uninstall()
    counted = list(pauses.count)
    gc.collect(2)
    assert pauses.count == counted and pauses._on_collect not in gc.callbacks


def test_a_long_full_collection_freezes_what_survived_it_and_start_up_freezes_what_is_held():
    pauses = GcPauses(freeze_after_ms=0.0)
    try:
        pauses.install()                                   # start-up: collect, then freeze
        assert pauses.freezes == 1 and gc.get_freeze_count() > 0
        kept = [[i] for i in range(20_000)]                # survivors of the next full collection
        frozen = gc.get_freeze_count()
        gc.collect(2)                                      # longer than 0 ms: what is left is frozen
        assert pauses.freezes >= 2 and gc.get_freeze_count() >= frozen + len(kept)   # (and any automatic ones)
        assert pauses.as_json()["freezes"] == pauses.freezes and pauses.as_json()["frozen"] == gc.get_freeze_count()
        del kept
    finally:
        pauses.uninstall()
        gc.unfreeze()                                      # leave the test process as it was
    plain = GcPauses().install()                           # measuring only: nothing is frozen
    try:
        gc.collect(2)
        assert gc.get_freeze_count() == 0 and plain.freezes == 0
    finally:
        plain.uninstall()


def test_the_report_never_walks_the_permanent_generation(monkeypatch):
    # counting the frozen objects walks all of them (a stall of ~15 ms on a scheduler's heap),
    # so the report gives the count taken at the last freeze instead of asking again
    pauses = GcPauses(freeze_after_ms=0.0)
    try:
        pauses.install()
        at_freeze = gc.get_freeze_count()
        assert pauses.frozen == at_freeze > 0

        def walk() -> int:
            raise AssertionError("as_json walked the permanent generation")

        monkeypatch.setattr(gc, "get_freeze_count", walk)
        assert pauses.as_json()["frozen"] == at_freeze
    finally:
        monkeypatch.undo()
        pauses.uninstall()
        gc.unfreeze()
