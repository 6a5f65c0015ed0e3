"""The dashboard's What-if page (/ui/whatif): a tiny log directory built broker-free (the
replay tests' synth), the form posted through TestClient, the run's status polled until it
ends, then its plots and figures on the page; a directory outside the root is refused."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from api_helpers import TOKENS, ListSink, make_service, write_tokens

sys.path.insert(0, str(Path(__file__).parents[1] / "replay"))

from synth import make_logdir  # noqa: E402

from suanli.api.readmodel import ReadModel  # noqa: E402
from suanli.api.ui import Dashboard  # noqa: E402

ALPHA = {"Authorization": f"Bearer {TOKENS['alpha']}"}


@pytest.fixture()
def root(tmp_path, monkeypatch) -> Path:
    r = tmp_path / "exports"
    make_logdir(r / "cell-c1", n_tasks=40)
    monkeypatch.setenv("SUANLI_WHATIF_ROOT", str(r))
    return r


@pytest.fixture()
def client(root, tmp_path):
    from fastapi.testclient import TestClient

    from suanli.api.auth import TokenStore
    from suanli.api.rest import create_app

    model = ReadModel()
    ui = Dashboard(model)
    app = create_app(make_service(ListSink(), model), TokenStore.from_file(write_tokens(tmp_path / "t.toml")))
    ui.mount(app)
    with TestClient(app) as c:
        yield c
    ui.close()


def wait_done(client, run_url: str) -> dict:
    deadline = time.monotonic() + 300      # generous bound: a loop on the condition, not a timing check
    while True:
        st = client.get(run_url + "/status", headers=ALPHA).json()
        if st["state"] != "running" or time.monotonic() > deadline:
            return st
        time.sleep(0.5)


def test_whatif_page_runs_and_shows_plots_and_figures(client, root):
    page = client.get("/ui/whatif", headers=ALPHA)
    assert page.status_code == 200
    assert 'href="/ui/whatif"' in page.text and 'value="cell-c1"' in page.text

    r = client.post("/ui/whatif", data={"logdir": "cell-c1", "policies": "recorded,bestfit"},
                    headers=ALPHA, follow_redirects=False)
    assert r.status_code == 303, r.text
    run_url = r.headers["location"]
    assert run_url.startswith("/ui/whatif/runs/")

    st = wait_done(client, run_url)
    assert st["state"] == "done", st
    assert st["plots"] and all(p.endswith(".png") for p in st["plots"])

    html = client.get(run_url, headers=ALPHA).text
    for p in st["plots"]:
        assert f"{run_url}/files/{p}" in html
        img = client.get(f"{run_url}/files/{p}", headers=ALPHA)
        assert img.status_code == 200 and img.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<th>recorded</th>" in html and "<th>bestfit</th>" in html
    assert "tasks submitted" in html and "placed (success %)" in html
    run_dir = next((root / ".whatif-runs").iterdir())
    assert (run_dir / "whatif.json").is_file()

    # only files inside the run's report directory, and only to signed-in users
    assert client.get(f"{run_url}/files/..%2Fwhatif.json", headers=ALPHA).status_code == 404
    assert client.get(f"{run_url}/files/{st['plots'][0]}").status_code == 401


def test_whatif_refuses_outside_root_and_bad_policies(client, root, tmp_path):
    outside = make_logdir(tmp_path / "elsewhere", n_tasks=10)
    for logdir in (str(outside), "../elsewhere", "cell-c1/../../elsewhere"):
        r = client.post("/ui/whatif", data={"logdir": logdir, "policies": "recorded"}, headers=ALPHA)
        assert r.status_code == 400 and "outside the what-if root" in r.text, logdir
    r = client.post("/ui/whatif", data={"logdir": "cell-c1", "policies": "recorded; rm -rf /"}, headers=ALPHA)
    assert r.status_code == 400 and "Policies:" in r.text
    assert not (root / ".whatif-runs").exists()


def test_whatif_needs_sign_in(client):
    r = client.get("/ui/whatif", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    assert client.post("/ui/whatif", data={"logdir": "cell-c1", "policies": "recorded"}).status_code == 401


def test_whatif_failed_run_shows_error_tail(client):
    r = client.post("/ui/whatif", data={"logdir": "cell-c1", "policies": "recorded,no-such-policy"},
                    headers=ALPHA, follow_redirects=False)
    assert r.status_code == 303
    st = wait_done(client, r.headers["location"])
    assert st["state"] == "failed" and st["error"]
    html = client.get(r.headers["location"], headers=ALPHA).text
    assert 'id="whatif-error"' in html and "no-such-policy" in html
