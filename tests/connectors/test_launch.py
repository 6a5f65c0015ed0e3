"""The connector command line: built-in and external kinds (no services)."""
from __future__ import annotations

import subprocess
import sys

from suanli.connectors import launch


def test_external_kinds_are_listed_without_importing_their_modules():
    out = subprocess.run([sys.executable, "-c", (
        "import sys; from suanli.connectors import launch; launch._parser().format_help(); "
        "print(sorted(m for m in sys.modules if m.startswith('suanli.connectors.')))")],
        capture_output=True, text=True, check=True).stdout
    assert "suanli.connectors.kubernetes" not in out
    assert set(launch.EXTERNAL) <= set(launch.KINDS)


def test_an_external_kind_takes_its_modules_options_and_refuses_a_bad_configuration(capsys):
    for kind, (module, _what) in launch.EXTERNAL.items():
        assert launch._parser(load=kind).parse_args([kind]).kind == kind
    assert launch.main(["k8s", "--kubeconfig", "/nonexistent/kubeconfig", "--cell", "k"]) == 2
    err = capsys.readouterr().err
    assert "suanli connector k8s:" in err and "cannot read the kubeconfig /nonexistent/kubeconfig" in err
