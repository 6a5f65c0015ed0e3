"""API token files and lookups."""
from __future__ import annotations

import json

import pytest

from suanli.api.auth import TokenStore
from suanli.errors import AuthError, ConfigError


@pytest.mark.parametrize("name, text", [
    ("t.toml", '[tokens]\n"secret-one-1" = "vision"\n"secret-two-2" = "speech"\n'),
    ("t.toml", '"secret-one-1" = "vision"\n"secret-two-2" = "speech"\n'),
    ("t.json", json.dumps({"tokens": {"secret-one-1": "vision", "secret-two-2": "speech"}})),
    ("t.json", json.dumps({"secret-one-1": "vision", "secret-two-2": "speech"})),
])
def test_token_files_in_toml_or_json(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    store = TokenStore.from_file(path)
    assert store.tenant("secret-one-1") == "vision"
    assert store.tenant_from_header("Bearer secret-two-2") == "speech"
    assert store.tenant_from_header("bearer   secret-two-2  ") == "speech"
    assert store.tenants == {"vision", "speech"}


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic secret-one-1", "secret-one-1",
                                    "Bearer secret-one-", "Bearer secret-one-12"])
def test_bad_headers_are_auth_errors(header):
    store = TokenStore({"secret-one-1": "vision"})
    with pytest.raises(AuthError):
        store.tenant_from_header(header)


@pytest.mark.parametrize("text", ["", "not toml [", '[tokens]\n"short" = "x"\n', '"secret-one-1" = "bad tenant!"\n',
                                  '"secret-one-1" = 3\n'])
def test_unusable_token_files_are_config_errors(tmp_path, text):
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        TokenStore.from_file(path)


def test_from_env_needs_a_file(monkeypatch, tmp_path):
    monkeypatch.delenv("SUANLI_API_TOKENS", raising=False)
    with pytest.raises(ConfigError, match="SUANLI_API_TOKENS"):
        TokenStore.from_env()
    with pytest.raises(ConfigError, match="cannot read"):
        TokenStore.from_env(tmp_path / "missing.toml")


def test_a_token_file_may_hold_digests_only_and_the_store_keeps_no_token(tmp_path):
    from suanli.api.auth import hash_token

    path = tmp_path / "t.toml"
    path.write_text(f'[tokens]\n"{hash_token("secret-one-1")}" = "vision"\n"secret-two-2" = "speech"\n')
    store = TokenStore.from_file(path)
    assert store.tenant("secret-one-1") == "vision" and store.tenant("secret-two-2") == "speech"
    assert store.plaintext_tenants == ["speech"]                 # the server warns about these
    with pytest.raises(AuthError):
        store.tenant(hash_token("secret-one-1"))                  # the digest itself is no token
    assert "secret-two-2" not in repr(vars(store))
    assert hash_token("secret-one-1") == "sha256:" + __import__("hashlib").sha256(b"secret-one-1").hexdigest()


@pytest.mark.parametrize("key", ["sha256:abc", "sha256:" + "G" * 64, "sha256:" + "A" * 64])
def test_a_malformed_digest_is_a_config_error_that_says_the_form(key):
    with pytest.raises(ConfigError, match="64 lowercase hex digits"):
        TokenStore({key: "vision"})


def test_suanli_api_hash_token_reads_stdin_and_prints_the_toml_line():
    import subprocess
    import sys

    from suanli.api.auth import hash_token

    out = subprocess.run([sys.executable, "-m", "suanli", "api", "hash-token", "--tenant", "team-a"],
                         input="s3cr3t-token-a\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f'"{hash_token("s3cr3t-token-a")}" = "team-a"'
    bad = subprocess.run([sys.executable, "-m", "suanli", "api", "hash-token"], input="", capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "standard input" in bad.stderr
