"""`suanli whatif` and `suanli replay --verify` run with no broker and no Kafka client.

DESIGN.md: replay needs neither. The commands run in a subprocess whose interpreter refuses
to import ``aiokafka`` and ``faust`` (a ``sitecustomize`` on PYTHONPATH puts a finder first
on ``sys.meta_path``) and whose settings name an unreachable broker and registry. Every
attempt is also written to a file, so an import that some code catches still fails the test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from synth import make_logdir

BLOCKED = ("aiokafka", "faust")

SITECUSTOMIZE = '''
import os
import sys

_BLOCKED = {blocked!r}
_LOG = os.environ.get("SUANLI_TEST_BLOCKED_LOG")


class _NoKafkaClient:
    """Refuses the Kafka clients: replay must run without them."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname.split(".")[0] in _BLOCKED:
            if _LOG:
                import traceback
                with open(_LOG, "a") as f:
                    f.write(fullname + "\\n" + "".join(traceback.format_stack(limit=12)) + "\\n")
            raise ImportError(f"{{fullname}} is blocked: replay must run without a Kafka client")
        return None


sys.meta_path.insert(0, _NoKafkaClient)
'''.format(blocked=BLOCKED)


@dataclass
class NoKafka:
    env: dict[str, str] = field(repr=False)   # the environment: not printed in failure reports
    attempts: Path                             # one entry per blocked import, with its stack


@pytest.fixture
def no_kafka(tmp_path) -> NoKafka:
    """The environment of a subprocess that cannot import a Kafka client, and its attempt log."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    attempts = tmp_path / "blocked-imports.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["SUANLI_TEST_BLOCKED_LOG"] = str(attempts)
    env["SUANLI_KAFKA"] = "127.0.0.1:1"            # nothing listens there: no broker
    env["SUANLI_REGISTRY"] = "http://127.0.0.1:1"  # and no registry
    env.pop("SUANLI_CONFIG", None)
    return NoKafka(env, attempts)


def _suanli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suanli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_blocker_blocks(no_kafka):
    env, attempts = no_kafka.env, no_kafka.attempts
    proc = subprocess.run([sys.executable, "-c", "import aiokafka"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "aiokafka is blocked" in proc.stderr
    assert attempts.read_text().startswith("aiokafka\n")


def test_replay_verify_and_whatif_run_without_a_kafka_client(no_kafka, tmp_path, openb_small):
    env, attempts = no_kafka.env, no_kafka.attempts
    logdir = make_logdir(tmp_path / "log", redeliver_every=13)

    replay = _suanli(env, "replay", str(logdir), "--verify", "--quiet", "--json", str(tmp_path / "verify.json"))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "IDENTICAL" in replay.stdout
    assert json.loads((tmp_path / "verify.json").read_text())["identical"] is True

    # What-if of the log directory: the same CellRunner path, under two policies.
    log_whatif = _suanli(env, "whatif", str(logdir), "--policy", "recorded,bestfit", "--quiet",
                         "--json", str(tmp_path / "log-whatif.json"), "--report", str(tmp_path / "log-report"))
    assert log_whatif.returncode == 0, log_whatif.stdout + log_whatif.stderr
    assert "recorded" in json.dumps(json.loads((tmp_path / "log-whatif.json").read_text()))

    # The FGD protocol on ~400 openb tasks, two seeds in two worker processes (they inherit
    # the blocker through PYTHONPATH).
    nodes, pods = openb_small
    fgd = _suanli(env, "whatif", "--protocol", "fgd", "--nodes", nodes, "--pods", pods, "--seeds", "42,43",
                  "--policy", "bestfit,default", "--workers", "2", "--json", str(tmp_path / "fgd.json"))
    assert fgd.returncode == 0, fgd.stdout + fgd.stderr
    doc = json.loads((tmp_path / "fgd.json").read_text())
    assert list(doc["policies"]) == ["bestfit", "default"]
    assert all(len(v["unallocated_gpu_pct"]["per_seed"]) == 2 for v in doc["policies"].values())

    assert not attempts.exists(), f"a Kafka client was imported:\n{attempts.read_text()}"
