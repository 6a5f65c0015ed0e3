"""``suanli stack prune``: which topics belong to which namespace (pure), and a prune on the
real broker that removes one namespace's topics and local state and keeps the rest."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid

import pytest

from suanli.config import load_settings, to_env
from suanli.deploy.namespace_prune import namespaces, plan, running_planes
from suanli.streams.kafka_io import ensure_topics, list_topics
from suanli.streams.topics import core_topics

FAUST = ["{ns}-scheduler-cell-snapshots-changelog", "{ns}-intake-__assignor-__leader"]


def _of(ns: str) -> list[str]:
    return [f"{ns}.cells", f"{ns}.raw.tasks", f"{ns}.decisions"] + [t.format(ns=ns) for t in FAUST]


def test_each_topic_goes_to_its_namespace_the_longest_name_first_and_foreign_topics_to_none():
    topics = _of("bench") + _of("bench-2") + ["__consumer_offsets", "_schemas", "kafkasql-journal",
                                              "suanli-connect.configs", "suanli-connect.offsets",
                                              "loner.decisions"] + _of("suanli")
    found = namespaces(topics)
    assert sorted(found) == ["bench", "bench-2", "suanli"]            # loner has no cell log nor raw topic
    assert found["bench"] == sorted(_of("bench")) and found["bench-2"] == sorted(_of("bench-2"))
    # Connect's own topics start with "suanli-" but are no worker group's: not the namespace's
    assert not any(t.startswith("suanli-connect") for ts in found.values() for t in ts)


def test_plan_keeps_the_kept_namespaces_and_takes_only_those_matching_the_glob():
    topics = _of("bench1") + _of("bench2") + _of("t1") + _of("suanli")
    assert sorted(plan(topics, {"suanli"})) == ["bench1", "bench2", "t1"]
    assert sorted(plan(topics, {"suanli", "bench2"}, "bench*")) == ["bench1"]
    assert plan(topics, set(), "nothing*") == {}
    # a namespace known only from its local state (its topics gone) is pruned too
    assert plan(topics, {"suanli", "bench1", "bench2", "t1"}, also={"old9"}) == {"old9": []}


def test_running_planes_reads_the_tag_from_each_process_command_line(tmp_path):
    for pid, argv in ((101, [sys.executable, "-X", "suanli-plane=ns1", "-m", "x"]),
                      (102, [sys.executable, "-m", "y"]), (103, ["java", "-X", "suanli-plane=ns1"])):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "self").mkdir()
    assert running_planes(tmp_path) == {"ns1": [101, 103]}


@pytest.mark.stack
def test_prune_deletes_one_namespace_and_keeps_the_kept_and_the_running(stack, tmp_path):
    run = uuid.uuid4().hex[:8]
    names = {role: f"prune{run}{role}" for role in ("gone", "kept", "busy")}
    orphan = f"prune{run}orphan"                  # local state only: its topics went with an old broker
    (tmp_path / "workers" / orphan / "intake").mkdir(parents=True)
    base = load_settings(home=tmp_path)
    for ns in names.values():
        asyncio.run(ensure_topics(base.bootstrap_servers, core_topics(1, ns)))
        (tmp_path / "workers" / ns / "scheduler").mkdir(parents=True)
        (tmp_path / "workers" / ns / "scheduler" / "latency.json").write_text("{}")
        (tmp_path / "audit" / ns).mkdir(parents=True)
        for where, name in (("logs", f"{ns}-scheduler.log"), ("run", f"{ns}-scheduler.pid")):
            (tmp_path / where).mkdir(exist_ok=True)
            (tmp_path / where / name).write_text("x")
    busy = subprocess.Popen([sys.executable, "-X", f"suanli-plane={names['busy']}", "-c",
                             "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    env = {**to_env(base), "PATH": "/usr/bin:/bin"}

    def prune(*extra: str, keep: str = names["kept"]) -> dict:
        out = subprocess.run([sys.executable, "-m", "suanli", "stack", "prune", "--match", f"prune{run}*",
                              "--keep", keep, "--json", *extra], capture_output=True, text=True,
                             env=env, timeout=120, check=True)
        return json.loads(out.stdout)
    try:
        dry = prune()
        assert dry["dry_run"] and sorted(r["namespace"] for r in dry["namespaces"]) == sorted(
            [names["gone"], names["busy"], orphan])
        assert [r["running_pids"] for r in dry["namespaces"] if r["namespace"] == names["busy"]] == [[busy.pid]]
        assert all(t in asyncio.run(list_topics(base.bootstrap_servers)) for t in (f"{names['gone']}.cells",))
        done = prune("--yes")
    finally:
        busy.communicate(b"")
    assert sorted(done["pruned"]) == sorted([names["gone"], orphan]) and done["kept_running"] == [names["busy"]]
    assert not (tmp_path / "workers" / orphan).exists()
    assert done["topics_deleted"] == len(core_topics(1, names["gone"]))
    left = set(asyncio.run(list_topics(base.bootstrap_servers)))
    assert not any(t.startswith(f"{names['gone']}.") for t in left)
    assert {f"{names['kept']}.cells", f"{names['busy']}.cells"} <= left
    assert not (tmp_path / "workers" / names["gone"]).exists() and not (tmp_path / "audit" / names["gone"]).exists()
    assert not (tmp_path / "logs" / f"{names['gone']}-scheduler.log").exists()
    assert not (tmp_path / "run" / f"{names['gone']}-scheduler.pid").exists()
    assert (tmp_path / "workers" / names["kept"]).is_dir() and (tmp_path / "workers" / names["busy"]).is_dir()
    assert (tmp_path / "logs" / f"{names['kept']}-scheduler.log").is_file()
    # tidy: the test's other two namespaces go too, now that nothing runs in them
    assert sorted(prune("--yes", keep="none")["pruned"]) == sorted([names["kept"], names["busy"]])


def test_local_dirs_are_the_workers_and_audit_directories(tmp_path):
    from suanli.deploy.namespace_prune import local_dirs

    (tmp_path / "workers" / "a").mkdir(parents=True)
    (tmp_path / "audit" / "a").mkdir(parents=True)
    assert local_dirs(load_settings(home=tmp_path), "a") == [tmp_path / "workers" / "a", tmp_path / "audit" / "a"]
    assert local_dirs(load_settings(home=tmp_path), "b") == []


def test_local_files_are_the_namespace_s_service_logs_and_pids_and_never_a_longer_name_s(tmp_path):
    from suanli.deploy.namespace_prune import local_files

    (tmp_path / "logs").mkdir()
    (tmp_path / "run").mkdir()
    mine = [tmp_path / "logs" / f"bench-{s}" for s in ("intake.log", "scheduler-2.log", "sim.log", "nodes-bridge.log",
                                                      "api-0.log", "api-0-tokens.toml")]
    mine.append(tmp_path / "run" / "bench-scheduler.pid")
    others = [tmp_path / "logs" / n for n in ("bench-2-intake.log", "bench-sim-intake.log", "kafka.log",
                                               "bench-notes.txt", "benchx-intake.log")]
    for f in mine + others:
        f.write_text("x")
    assert local_files(load_settings(home=tmp_path), "bench") == sorted(mine)
    assert local_files(load_settings(home=tmp_path), "bench-2") == [tmp_path / "logs" / "bench-2-intake.log"]
