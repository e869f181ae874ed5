"""An outage is never recorded as a result: systemic failures in a row stop the side with exit 69, and a side
with too many excluded rows fails, so DVC (which caches only a stage that succeeded) never caches it."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skillevo.bench import cellstore
from skillevo.core import models
from skillevo.files.errors import BrokenEnvironment
from skillevo.simulator import Simulator, load_all
from skillevo.stages import bench as bench_stage
from tests.bench_fixtures import ROOT, make_mini, write_params
from tests.gateway import BearerGateway

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
ENVIRONMENT = BrokenEnvironment.exit_code
TOKEN = "an-outage-test-token"


class _Down(BaseHTTPRequestHandler):
    """An endpoint that accepts connections and answers every request with 503, as a gateway in an outage."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"type": "error", "error": {"type": "api_error", "message": "upstream unavailable"}}).encode()
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_POST

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def down():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Down)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _args(tmp_path, url: str, **bench) -> list[str]:
    tasks_file = make_mini(tmp_path)
    params = write_params(tmp_path / "params.yaml", runs=4,
                          model={"backend": "endpoint", "base_url": url, "name": "claude-sonnet-4-6"},
                          bench={"workers": 1, "max_retries": 0, **bench})
    return ["--side", "incumbent", "--tasks", str(tasks_file), "--skills", str(ROOT / "skills"),
            "--params", str(params), "--out", str(tmp_path / "out")]


def test_consecutive_systemic_failures_stop_the_side_with_exit_69(monkeypatch, tmp_path, down, capsys):
    monkeypatch.setenv(models.AUTH_TOKEN_ENV, "a-gateway-token")
    assert bench_stage.main(_args(tmp_path, down, max_consecutive_failures=2)) == ENVIRONMENT
    err = capsys.readouterr().err
    assert "bench: environment: 2 cells in a row failed for a systemic reason" in err, err
    assert "the side stops (params bench.max_consecutive_failures)" in err and "Traceback" not in err
    rows = [json.loads(line) for line in (tmp_path / "out/results.jsonl").read_text().splitlines()]
    kinds = [r["error_kind"] for r in rows]
    assert len(rows) < 8 and kinds.count("session-error") >= 2  # stopped early: a cell in flight is `cancelled`
    assert set(kinds) <= {"session-error", "infra-error", "cancelled"}
    assert not (tmp_path / "out/bench.json").exists()  # no provenance: nothing here can pass for a result


def test_a_side_with_too_many_excluded_rows_fails(monkeypatch, tmp_path, down, capsys):
    monkeypatch.setenv(models.AUTH_TOKEN_ENV, "a-gateway-token")
    assert bench_stage.main(_args(tmp_path, down, max_consecutive_failures=1000)) == ENVIRONMENT
    err = capsys.readouterr().err
    assert re.search(r"bench: environment: (\d+) of \1 rows were excluded as harness or API faults, over params "
                     r"bench\.max_excluded_pct 20%", err), err
    assert not (tmp_path / "out/bench.json").exists()


def test_an_outage_mid_bench_fails_the_stage_and_the_next_run_resumes_from_the_store(monkeypatch, tmp_path, capsys):
    """The endpoint goes down after some cells: the stage fails (exit 69, no bench.json, so DVC caches nothing),
    the cells measured before the outage are in the store, the outage's own rows are not; when the endpoint is
    back the same command serves the first and pays only for the rest."""
    monkeypatch.setenv(models.AUTH_TOKEN_ENV, TOKEN)
    tasks_file = make_mini(tmp_path)
    store, out = tmp_path / "store", tmp_path / "out"
    with Simulator(load_all([tasks_file.parent / "playbooks/mini.yaml"]), api_key=TOKEN) as sim, \
            BearerGateway(sim.url(), TOKEN) as gw:
        params = write_params(tmp_path / "params.yaml", runs=2,
                              model={"backend": "endpoint", "base_url": gw.url, "name": "claude-sonnet-4-6"},
                              bench={"workers": 1, "max_retries": 0, "max_consecutive_failures": 2})
        args = ["--side", "incumbent", "--tasks", str(tasks_file), "--skills", str(ROOT / "skills"),
                "--params", str(params), "--store", str(store), "--out", str(out)]
        stop = threading.Event()

        def outage_after_three_cells() -> None:
            while not stop.is_set() and len(list(cellstore.Store(store).keys())) < 3:
                time.sleep(0.05)
            gw.down = True

        watcher = threading.Thread(target=outage_after_three_cells, daemon=True)
        watcher.start()
        try:
            assert bench_stage.main(args) == ENVIRONMENT
        finally:
            stop.set()
            watcher.join()
        assert "cells in a row failed for a systemic reason" in capsys.readouterr().err
        assert not (out / "bench.json").exists() and (out / ".partial").is_file()
        stored = sorted(cellstore.Store(store).keys())
        assert len(stored) >= 3
        gw.down = False
        assert bench_stage.main(args) == 0, capsys.readouterr().err
    bench = json.loads((out / "bench.json").read_text())
    assert bench["cell_store"]["served"] == len(stored)
    assert bench["cell_store"]["paid"] == bench["cells"] - len(stored) == 12 - len(stored)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["error_kind"] not in ("session-error", "infra-error", "cancelled") for r in rows)
    assert not (out / ".partial").exists()
