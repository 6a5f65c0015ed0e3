"""deploy/k8s/ validated by a real API server (issue 19, part 5): ``kubectl apply
--dry-run=server -f deploy/k8s/`` against the kube-apiserver that deploy/kubernetes.py runs on
loopback (built by .ci/setup.d/80-kubernetes.sh; the test fails, never skips, when it is missing).

The server's dry run runs every object through decoding (strict: an unknown field is an
error), defaulting, validation and admission without persisting it (Pod Security only warns
about workload templates; it enforces on pods). It cannot admit
objects into a namespace that does not exist yet, so the Namespace is applied for real first
(kubectl's own advice). A deliberately broken copy of a manifest must be refused, so the test
can fail.
"""
from __future__ import annotations

import shutil

import pytest
import yaml

from suanli.config import REPO_ROOT
from suanli.deploy import kubernetes as kube

MANIFESTS = REPO_ROOT / "deploy" / "k8s"

pytestmark = pytest.mark.stack      # a service test, like the other tests that start services


def test_every_manifest_passes_the_api_servers_dry_run(apiserver):
    ns = kube.kubectl(apiserver, "apply", "-f", str(MANIFESTS / "00-namespace.yaml"))
    assert ns.returncode == 0, ns.stderr
    run = kube.kubectl(apiserver, "apply", "--dry-run=server", "-f", str(MANIFESTS))
    assert run.returncode == 0, run.stderr
    applied = {line.split()[0] for line in run.stdout.splitlines() if line.strip()}
    kinds = {kind for f in sorted(MANIFESTS.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d
             for kind in [f"{d['kind'].lower()}/{d['metadata']['name']}"]}
    # every object was sent (kubectl prints "<kind>[.<group>]/<name> <verb> (server dry run)")
    assert len(applied) == len(kinds), (sorted(applied), sorted(kinds))
    assert all("(server dry run)" in line for line in run.stdout.splitlines() if line.strip()), run.stdout
    wanted = {"deployment.apps/suanli-intake", "statefulset.apps/suanli-scheduler", "deployment.apps/suanli-telemetry",
              "deployment.apps/suanli-api", "poddisruptionbudget.policy/suanli-scheduler", "configmap/suanli-config",
              "secret/suanli-endpoints", "clusterrole.rbac.authorization.k8s.io/suanli-k8s-connector"}
    assert wanted <= applied, sorted(applied)


def test_the_workers_read_kafka_and_the_registry_from_the_secret_and_have_probes():
    docs = [d for f in sorted(MANIFESTS.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert {d["metadata"]["name"] for d in workloads} == {"suanli-intake", "suanli-scheduler", "suanli-telemetry",
                                                          "suanli-api", "suanli-k8s-connector"}
    for d in workloads:
        for c in d["spec"]["template"]["spec"]["containers"]:
            assert {"secretRef": {"name": "suanli-endpoints"}} in c["envFrom"], d["metadata"]["name"]
            assert c.get("readinessProbe") and c.get("livenessProbe"), d["metadata"]["name"]
            assert c["resources"]["requests"] and c["resources"]["limits"], d["metadata"]["name"]
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "suanli-endpoints")
    assert set(secret["stringData"]) == {"SUANLI_KAFKA", "SUANLI_REGISTRY"}
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == "suanli-scheduler")
    assert pdb["spec"]["selector"]["matchLabels"] == next(
        d for d in workloads if d["metadata"]["name"] == "suanli-scheduler")["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("breakage, refusal", [
    # a field the API does not have: refused by the server's strict field validation
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(imagePullPolicyy="Always"), "unknown field"),
    # a value the API validation refuses
    (lambda d: d["spec"].update(replicas=-1), "replicas"),
    # a privileged container: this API server does not allow them (--allow-privileged is off)
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(privileged=True),
     "privileged: Forbidden"),
])
def test_a_broken_manifest_is_refused(apiserver, tmp_path, breakage, refusal):
    ns = kube.kubectl(apiserver, "apply", "-f", str(MANIFESTS / "00-namespace.yaml"))
    assert ns.returncode == 0, ns.stderr
    doc = yaml.safe_load((MANIFESTS / "40-telemetry.yaml").read_text())
    breakage(doc)
    broken = tmp_path / "k8s"
    shutil.copytree(MANIFESTS, broken)
    (broken / "40-telemetry.yaml").write_text(yaml.safe_dump(doc))
    run = kube.kubectl(apiserver, "apply", "--dry-run=server", "-f", str(broken))
    assert run.returncode != 0, run.stdout
    assert refusal in run.stderr, run.stderr
