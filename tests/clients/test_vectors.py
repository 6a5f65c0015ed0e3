"""Cross-language test vectors (schemas/vectors): every encoder writes the same bytes, every
decoder reads every other client's output.

Encoders: Go (hamba/avro), Java (Apache Avro), TypeScript (avsc), Python (fastavro: the
vectors themselves), and the kcat shell script's bash encoder for the vectors it can express.
Decoders: Go, Java, TypeScript, Python. No broker or registry is needed.
"""
from __future__ import annotations

import io
import json
import sys

import fastavro
import pytest

from client_helpers import LANGS, REPO, VECTORS, ensure_built, require, run, shell_argv, vectors_argv
from suanli.schemas.codec import parse_plain

VECTOR_FILES = sorted(VECTORS.glob("*.json"))


def _vectors() -> list[dict]:
    return [json.loads(p.read_text()) for p in VECTOR_FILES]


def test_vectors_are_generated_and_current():
    names = {v["name"] for v in _vectors()}
    assert {"task-shared-gpu", "task-whole-gpus-full", "task-optional-null", "reservation-bid",
            "reservation-bid-flexible", "reservation-rejected", "node-registered"} <= names
    proc = run([sys.executable, VECTORS / "generate.py", "--check"], cwd=REPO, check=False)
    assert proc.returncode == 0, f"schemas/vectors is stale: run schemas/vectors/generate.py\n{proc.stdout}"


class Encodings:
    """Each client's `vectors --check --out DIR` (run once, on first use): its output folder
    and the check's report. Python's "output" is the vectors' own bytes (fastavro)."""

    def __init__(self, root):
        self.root = root
        self.reports: dict = {}

    def dir(self, lang: str):
        out = self.root / lang
        if lang == "python" and not out.exists():
            out.mkdir()
            for v in _vectors():
                (out / f"{v['name']}.avro").write_bytes(bytes.fromhex(v["avro_hex"]))
        elif lang != "python" and lang not in self.reports:
            self.reports[lang] = run([*vectors_argv(lang), "--dir", VECTORS, "--check", "--out", out],
                                     cwd=REPO, check=False)
        return out

    def report(self, lang: str):
        self.dir(lang)
        return self.reports[lang]


@pytest.fixture(scope="session")
def encodings(tmp_path_factory) -> Encodings:
    return Encodings(tmp_path_factory.mktemp("vector-encodings"))


@pytest.mark.parametrize("lang", LANGS)
def test_encoder_writes_the_vector_bytes_and_decoder_reads_them(lang, encodings):
    proc = encodings.report(lang)
    assert proc.returncode == 0, f"{lang} vectors --check failed:\n{proc.stdout}\n{proc.stderr}"
    count = len(VECTOR_FILES)
    assert f"{2 * count} passed, 0 failed" in proc.stdout, proc.stdout
    for v in _vectors():
        body = (encodings.dir(lang) / f"{v['name']}.avro").read_bytes()
        assert body.hex() == v["avro_hex"], f"{lang} wrote other bytes for {v['name']}"


@pytest.mark.parametrize("decoder", LANGS)
def test_decoder_reads_every_other_clients_output(decoder, encodings):
    others = [lang for lang in ("python", *LANGS) if lang != decoder]
    argv = [*vectors_argv(decoder), "--dir", VECTORS]
    for other in others:
        argv += ["--decode", encodings.dir(other)]
    proc = run(argv, cwd=REPO, check=False)
    assert proc.returncode == 0, f"{decoder} could not decode:\n{proc.stdout}\n{proc.stderr}"
    assert f"{len(others) * len(VECTOR_FILES)} passed, 0 failed" in proc.stdout, proc.stdout


@pytest.mark.parametrize("encoder", LANGS)
def test_python_decodes_each_clients_output(encoder, encodings):
    from suanli.schemas.catalog import catalog

    schemas = {e.subject: parse_plain(e.schema) for e in catalog().values()}
    for v in _vectors():
        body = (encodings.dir(encoder) / f"{v['name']}.avro").read_bytes()
        stream = io.BytesIO(body)
        assert fastavro.schemaless_reader(stream, schemas[v["subject"]], None) == v["event"], v["name"]
        assert stream.tell() == len(body)


def test_shell_encoder_writes_the_vector_bytes():
    expressible = 0
    for v in _vectors():
        kind = v["subject"].rsplit(".", 1)[1]
        try:
            argv = shell_argv(kind, v["event"])
        except ValueError:
            continue  # a profile, accelerator requests or a NodeRegistered: not in the shell encoder
        expressible += 1
        got = run([*argv, "--hex"], cwd=REPO).stdout.strip()
        assert got == v["avro_hex"], f"produce.sh {' '.join(argv[1:])}\n got  {got}\n want {v['avro_hex']}"
    assert expressible >= 6  # both bids (fixed and flexible start, gang and not) among them


def test_go_unit_tests():
    ensure_built("go")
    proc = run([require("go", "Go"), "test", "./..."], cwd=REPO / "clients" / "go")
    assert "ok" in proc.stdout
