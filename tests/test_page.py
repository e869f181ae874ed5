"""The gate's page, results/gate/index.html (skillevo.gate.page): the decision first, in the report's words; the
effects per task, the cost ledger, the proposal and its diff; every cell's transcript a click away; everything an
agent wrote escaped; the size bounded; and a real browser (Debian's headless Chromium) that loads it from file://,
finds the decision, opens a transcript and takes a screenshot."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import pytest

from skillevo.core.results import Side, load_side, side_totals
from skillevo.files.digests import canonical_json, sha256_bytes
from skillevo.gate import page
from skillevo.gate.report import NO_PROPOSAL_LINE, summary_line, task_table
from skillevo.stages import gate as stage
from tests.gate_rows import CANDIDATE, INCUMBENT, row
from tests.test_gate_stage import setup_inputs

HOSTILE = '<script>alert(1)</script></details></pre>"><img src=x onerror=alert(2)>'
PLANTED_CELL = ("t1", CANDIDATE, 2)  # the candidate side's cell whose transcript says more than it should
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# what the page may hold: no script, no image but its own data: URI, no form, no frame, nothing that loads
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "nav", "a", "h1", "h2", "h3", "p", "section",
                "div", "ul", "li", "strong", "code", "br", "table", "tr", "th", "td", "pre", "span", "details",
                "summary", "img"}


def _events(text: str) -> list[dict]:
    return [
        {"type": "assistant", "message": {"content": [{"type": "text", "text": f"I will read the module. {text}"}]}},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Bash",
                                                       "input": {"command": f"echo '{text}'"}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": text, "is_error": True}]}},
    ]


def plant(side_dir: Path, cell: tuple[str, str, int], events: list[dict]) -> str:
    """Put `events` into a cell's stored transcript before its result, rebinding the row and bench.json as the
    bench would have bound them; return the transcript's path."""
    rows = [json.loads(line) for line in (side_dir / "results.jsonl").read_text().splitlines()]
    [target] = [r for r in rows if (r["task"], r["arm"], r["run"]) == cell]
    meta = target["transcripts"][0]
    lines = (side_dir / meta["path"]).read_bytes().splitlines(keepends=True)
    data = lines[0] + b"".join(canonical_json(e) + b"\n" for e in events) + b"".join(lines[1:])
    (side_dir / meta["path"]).write_bytes(data)
    meta.update(sha256=sha256_bytes(data), bytes=len(data))
    results = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (side_dir / "results.jsonl").write_bytes(results)
    bench = json.loads((side_dir / "bench.json").read_text())
    (side_dir / "bench.json").write_text(json.dumps({**bench, "results_sha256": sha256_bytes(results)}))
    return meta["path"]


def gate_with_page(tmp: Path) -> dict:
    """The gate stage, as dvc.yaml runs it, on two small sides, a proposal and an overlay, with hostile text planted
    in a transcript, the proposal and the overlay."""
    args = setup_inputs(tmp)
    plant(tmp / "cand", PLANTED_CELL, _events(HOSTILE))
    (tmp / "proposal.md").write_text(f"# Diagnosis\n\nRemove the wasteful line. {HOSTILE}\n")
    (tmp / "skills/work").mkdir(parents=True)
    (tmp / "skills/work/SKILL.md").write_text("---\nname: work\n---\nRead every module first.\nThen fix.\n")
    (tmp / "overlay/work").mkdir(parents=True)
    (tmp / "overlay/work/SKILL.md").write_text(f"---\nname: work\n---\nThen fix. {HOSTILE}\n")
    args += ["--proposal", str(tmp / "proposal.md"), "--overlay", str(tmp / "overlay"), "--skills", str(tmp / "skills")]
    assert stage.main(args) == 0
    out = tmp / "out"
    return {"out": out, "html": (out / page.PAGE).read_text(encoding="utf-8"),
            "promotion": json.loads((out / "promotion.json").read_text()),
            "sides": (load_side(tmp / "inc", "incumbent"), load_side(tmp / "cand", "candidate"))}


@pytest.fixture(scope="module")
def gated(tmp_path_factory) -> dict:
    return gate_with_page(tmp_path_factory.mktemp("page"))


class Tags(HTMLParser):
    """Every element the page's markup opens, and the ids it declares."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(text)
    return parser.tags


def section(text: str, name: str) -> str:
    """The text of one section, tags stripped and entities decoded, as a reader sees it."""
    body = re.search(rf'<section id="{name}">(.*?)</section>', text, re.S)
    assert body, f"no section {name}"
    return unescape(re.sub(r"<[^>]+>", " ", body.group(1)))


def test_the_gate_stage_writes_the_page_with_the_decision_first(gated):
    text, promotion = gated["html"], gated["promotion"]
    [decision] = promotion["decisions"]
    assert decision["decision"] == "promote"
    order = [text.index(f'<section id="{name}">') for name in ("decision", "effects", "cost", "proposal", "cells",
                                                                "provenance")]
    assert order == sorted(order)
    shown = " ".join(section(text, "decision").split())
    assert summary_line(decision) in shown  # the words of the gate's own line and of report.md
    assert f"{CANDIDATE}: promote" in shown and "estimated improvement 50.2%" in shown
    assert all(reason in shown for reason in decision["reasons"])
    assert "Simulated" in text  # the simulator's results say so, as the report does


def test_the_effects_ledger_and_proposal_are_the_reports_figures(gated):
    text, promotion, sides = gated["html"], gated["promotion"], gated["sides"]
    effects = " ".join(section(text, "effects").split())
    for cells in task_table(promotion["decisions"][0]):  # the header and each task, with its interval
        assert " ".join(" ".join(cells).split()) in effects
    assert 'src="data:image/svg+xml;base64,' in text  # the picture, inline
    cost = " ".join(section(text, "cost").split())
    for side in sides:
        totals = side_totals(side.rows)
        assert (f"{side.bench['side']} all arms {totals['runs']} {totals['sessions']} "
                f"{totals['total_cost_usd']:.4f} {totals['unmeasured_cost_runs']}") in cost
    proposal = section(text, "proposal")
    assert "Remove the wasteful line." in proposal and "-Read every module first." in proposal
    assert '<span class="add">+Then fix. &lt;script&gt;' in text  # the diff, coloured and escaped


def test_every_cell_has_a_stable_anchor_and_the_index_links_them_all(gated):
    text, sides = gated["html"], gated["sides"]
    found = tags(text)
    ids = [attrs["id"] for _, attrs in found if attrs.get("id", "").startswith("cell-")]
    expected = [page.cell_id(side.bench["side"], r) for side in sides for r in side.rows]
    assert sorted(ids) == sorted(expected) and len(set(ids)) == len(ids)
    assert page.cell_id("candidate", row("t1", CANDIDATE, 2)) == f"cell-candidate-t1-{CANDIDATE}-run2"
    links = {attrs["href"][1:] for tag, attrs in found if tag == "a" and attrs["href"].startswith("#cell-")}
    assert links == set(ids)
    assert sum(tag == "details" for tag, _ in found) == len(expected)
    assert all("open" not in attrs for tag, attrs in found if tag == "details")  # closed until asked for


def test_hostile_text_is_escaped_everywhere(gated):
    text = gated["html"]
    found = tags(text)
    assert {tag for tag, _ in found} <= ALLOWED_TAGS and "<script" not in text.lower()
    assert not [name for _, attrs in found for name in attrs if name.startswith("on")]  # no handler anywhere
    assert [attrs["src"][:26] for tag, attrs in found if tag == "img"] == ["data:image/svg+xml;base64,"]
    assert text.count("<details") == text.count("</details>") and text.count("<pre>") == text.count("</pre>")
    escaped = ("&lt;script&gt;alert(1)&lt;/script&gt;&lt;/details&gt;&lt;/pre&gt;&quot;&gt;"
               "&lt;img src=x onerror=alert(2)&gt;")
    assert text.count(escaped) >= 4  # the transcript's text and tool result, the proposal, the diff
    assert not re.search(r"(src|href)=\"(https?:)?//|@import|url\(", text)  # nothing loads from anywhere


def _side(directory: Path, name: str, rows: list[dict]) -> Side:
    return Side(directory=directory, bench={"side": name, "cell_store": None}, rows=tuple(rows))


def _bound(directory: Path, r: dict, data: bytes) -> dict:
    (directory / "transcripts").mkdir(parents=True, exist_ok=True)
    name = f"transcripts/{r['task']}-{r['arm']}-{r['run']}.jsonl".replace("<", "_").replace(">", "_")
    (directory / name).write_bytes(data)
    return {**r, "transcripts": [{"path": name, "sha256": sha256_bytes(data), "bytes": len(data)}]}


def test_a_flooded_transcript_is_cut_with_a_stated_marker(gated, tmp_path):
    flood = b"".join(canonical_json(e) + b"\n" for _ in range(4000) for e in _events("x" * 280 + HOSTILE))
    assert len(flood) > 4 << 20
    r = _bound(tmp_path, row("t1", INCUMBENT, 1), flood)
    text = page.render(gated["promotion"], [_side(tmp_path, "incumbent", [r])])
    assert len(text.encode()) < 6 * page.CELL_CAP + (64 << 10)  # escaping at most sextuples a character
    assert f"Cut: the page shows at most {page.CELL_CAP >> 10} KiB of each cell's transcripts" in text
    assert f"skillevo show {tmp_path}/{r['transcripts'][0]['path']}" in text
    assert "<script" not in text and text.count("<details") == text.count("</details>") == 1


def test_the_page_holds_at_most_page_cap_of_transcripts(gated, tmp_path, monkeypatch):
    monkeypatch.setattr(page, "PAGE_CAP", 3 * page.CELL_CAP)
    data = b"".join(canonical_json(e) + b"\n" for _ in range(1000) for e in _events("y" * 200))
    rows = [_bound(tmp_path, row("t1", INCUMBENT, n), data) for n in range(1, 7)]
    text = page.render(gated["promotion"], [_side(tmp_path, "incumbent", rows)])
    assert text.count("Not inlined: the page holds at most") == 3
    assert len(text.encode()) < 6 * 3 * page.CELL_CAP + (64 << 10)


def test_a_hostile_task_id_or_an_unreadable_transcript_breaks_nothing(gated, tmp_path):
    bad = row(HOSTILE, INCUMBENT, 1)  # rows are schema-checked before the page; the page does not rely on it
    tampered = _bound(tmp_path, row("t2", INCUMBENT, 1), b"{}\n")
    (tmp_path / tampered["transcripts"][0]["path"]).write_bytes(b"not what was bound\n")
    text = page.render(gated["promotion"], [_side(tmp_path, "incumbent", [bad, tampered])])
    [anchor] = [page.cell_id("incumbent", bad)]
    assert re.fullmatch(r"cell-[A-Za-z0-9._-]+", anchor) and f'id="{anchor}"' in text
    assert "<script" not in text and "<img src=x" not in text
    assert "No transcript recorded for this cell." in text and "unreadable: " in text


def test_a_declined_proposal_is_the_pages_decision(gated):
    declined = {**gated["promotion"], "decisions": [], "no_proposal": f"nothing to cut {HOSTILE}"}
    shown = " ".join(section(page.render(declined, gated["sides"]), "decision").split())
    assert shown.startswith(f"Decision no_proposal {NO_PROPOSAL_LINE}. The proposer's reason: nothing to cut {HOSTILE}")


def test_without_a_proposal_or_diff_the_page_says_so(gated):
    text = page.render(gated["promotion"], gated["sides"])
    assert "No proposal text was given to the gate." in text and "No overlay diff was given to the gate" in text


def test_the_diff_shows_added_files_and_execute_bits(tmp_path):
    (tmp_path / "skills/work").mkdir(parents=True)
    (tmp_path / "skills/work/SKILL.md").write_text("old\n")
    (tmp_path / "overlay/work/scripts").mkdir(parents=True)
    (tmp_path / "overlay/work/SKILL.md").write_text("new\n")
    (tmp_path / "overlay/work/scripts/run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "overlay/work/scripts/run.sh").chmod(0o755)
    text, diff = page.load_candidate(None, tmp_path / "overlay", tmp_path / "skills")
    assert text is None
    assert "-old\n+new\n" in diff and "+++ b/work/scripts/run.sh" in diff and "new mode 100755" in diff


# -- a real browser ---------------------------------------------------------------------------------------------


def chromium(tmp: Path, *args: str) -> str:
    """Headless Chromium on a page from file://, in its own profile, HOME and process group, with no name
    resolving (the page must need none); killed with its group after, or at 60 s."""
    home = tmp / "chromium-home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache"), "LANG": "C.UTF-8"}
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp / 'chromium-profile'}",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
           "--disable-background-networking", "--disable-component-update", "--disable-breakpad",
           "--host-resolver-rules=MAP * ~NOTFOUND", *args]
    proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish in 60 s: {' '.join(cmd)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind in its group
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return out.decode()


def enclosing_details(dom: str, anchor: str) -> str:
    """The opening tag of the <details> element that holds the element with id `anchor` (or is it)."""
    at = dom.index(f'id="{anchor}"')
    start = dom.rindex("<details", 0, at)
    assert "</details>" not in dom[start:at], f"{anchor} is not inside a <details>"
    return dom[start:dom.index(">", start) + 1]


@pytest.fixture
def browser() -> None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        if os.environ.get("SKILLEVO_REQUIRE_CHROMIUM"):
            pytest.fail(f"SKILLEVO_REQUIRE_CHROMIUM is set but there is no chromium ({CHROMIUM})")
        pytest.skip("no chromium: `apt-get install chromium` (SKILLEVO_REQUIRE_CHROMIUM=1 makes this a failure)")


def test_chromium_loads_the_page_finds_the_decision_and_opens_a_transcript(browser, gated, tmp_path):
    url = (gated["out"] / page.PAGE).resolve().as_uri()
    [decision] = gated["promotion"]["decisions"]
    dom = chromium(tmp_path, "--dump-dom", url)
    assert summary_line(decision) in " ".join(section(dom, "decision").split())
    assert "<script" not in dom and "<img src=x" not in dom
    cell = page.cell_id("candidate", dict(zip(("task", "arm", "run"), PLANTED_CELL, strict=True)))
    assert "open" not in enclosing_details(dom, cell)

    opened = chromium(tmp_path, "--dump-dom", f"{url}#{cell}")  # following a link to the cell opens it
    assert "open" in enclosing_details(opened, cell), "the linked cell's <details> did not open"
    assert sum("open" in attrs for attrs in re.findall(r"<details([^>]*)>", opened)) == 1
    body = opened[opened.index(f'id="{cell}"'):]
    body = body[:body.index("</details>")]
    assert "assistant: I will read the module." in unescape(body)
    assert HOSTILE in unescape(body) and HOSTILE not in body  # shown as text, not markup

    shot = tmp_path / "page.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", url)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5 << 10
    pixels = matplotlib.image.imread(shot)  # not a blank page: some of it is dark text
    assert (pixels[..., :3].mean(axis=-1) < 0.4).mean() > 0.002
    if os.environ.get("SKILLEVO_PAGE_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["SKILLEVO_PAGE_SCREENSHOT"])


def test_make_report_and_the_demos_last_lines_point_at_the_page(tmp_path):
    from skillevo.ops import generations

    (tmp_path / "gate").mkdir()
    (tmp_path / "gate/promotion.json").write_text(json.dumps({"decisions": [
        {"candidate_arm": CANDIDATE, "decision": "promote", "reasons": ["cheaper"]}]}))
    assert "page:" not in generations.status(tmp_path)  # a gate older than the page
    (tmp_path / "gate" / page.PAGE).write_text("<!DOCTYPE html>\n")
    assert f"page: {tmp_path / 'gate/index.html'} (open it in a browser" in generations.status(tmp_path)
