"""``llm-workstation docs``: real subprocesses against the real store through the Workstation's documents service —
add (progress, resumable after a SIGKILL), list, search (and its modes), remove, watch, and their exit codes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.documents import page_text, write_corrupt_pdf, write_pdf


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "docs", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _db() -> Path:
    return Path(os.environ["LLMW_HOME"]) / "data" / "documents.sqlite3"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    write_pdf(docs / "guide.pdf", [page_text("alpha"), page_text("okapi")])
    write_corrupt_pdf(docs / "broken.pdf", docs / "guide.pdf")
    (docs / "notes.md").write_text("# Notes\n\nThe capybara sleeps.\n")
    return docs


def test_add_reports_progress_and_list_shows_states_and_reasons(folder: Path) -> None:
    added = cli("add", str(folder))
    assert added.returncode == 0, added.stderr
    assert f"indexed {folder / 'guide.pdf'} (" in added.stderr and "2 pages)" in added.stderr
    assert f"failed {folder / 'broken.pdf'}: corrupt PDF" in added.stderr
    assert "done: 2 indexed" in added.stderr and "1 failed" in added.stderr
    listed = json.loads(cli("list", "--json").stdout)
    (collection,) = listed["collections"]
    assert (collection["name"], collection["file_count"], collection["failed"]) == ("default", 3, 1)
    files = {Path(f["path"]).name: f for f in collection["files"]}
    assert files["guide.pdf"]["state"] == "indexed" and files["guide.pdf"]["pages"] == 2
    assert files["broken.pdf"]["reason"] == "corrupt PDF (not a readable PDF file)"
    assert "failed   " in cli("list").stdout
    again = cli("add", str(folder))
    assert "done: 0 indexed (0 chunks), 3 unchanged" in again.stderr


def test_search_gives_path_page_text_and_score(folder: Path) -> None:
    cli("add", str(folder))
    found = cli("search", "okapi", "--json", "--top", "3")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits and Path(hits[0]["path"]).name == "guide.pdf" and hits[0]["page"] == 2
    assert "okapi" in hits[0]["text"] and hits[0]["score"] > 0
    (note,) = json.loads(cli("search", "capybara", "--json").stdout)["hits"]
    assert note["page"] is None
    assert "p. 2" in cli("search", "okapi").stdout
    assert cli("search", 'AND "( NEAR*').returncode == 0
    assert cli("search", "okapi", "--collection", "nope").returncode == 2


def test_search_takes_a_mode(folder: Path) -> None:
    cli("add", str(folder))
    keyword = json.loads(cli("search", "okapi", "--mode", "keyword", "--json").stdout)
    assert keyword["mode"] == keyword["ranked_by"] == "keyword" and Path(keyword["hits"][0]["path"]).name == "guide.pdf"
    assert json.loads(cli("search", "okapi", "--json").stdout)["mode"] == "auto"
    hybrid = cli("search", "okapi", "--mode", "hybrid")  # no embedding model chosen: keywords, saying so
    assert hybrid.returncode == 0 and "p. 2" in hybrid.stdout and "searched by keywords only" in hybrid.stderr
    assert cli("search", "okapi", "--mode", "fuzzy").returncode == 2


def test_add_watch_then_watch_off_and_on_and_list_shows_the_watched_folders(folder: Path, tmp_path: Path) -> None:
    added = cli("add", str(folder), "--watch", "--collection", "notes")
    assert added.returncode == 0, added.stderr
    assert "done: 2 indexed" in added.stderr and "watching: the app keeps these paths indexed" in added.stderr
    (collection,) = json.loads(cli("list", "--json").stdout)["collections"]
    assert collection["watched"] == [str(folder)]
    assert f"  watching {folder}" in cli("list").stdout.splitlines()
    off = cli("watch", str(folder), "off")
    assert (off.returncode, off.stdout.splitlines()) == (0, [f"no longer watching {folder} (collection 'notes')"])
    assert json.loads(cli("list", "--json").stdout)["collections"][0]["watched"] == []
    on = cli("watch", str(folder), "on", "--collection", "notes")
    assert on.returncode == 0 and on.stdout.startswith(f"watching {folder} (collection 'notes')")
    never = cli("watch", str(tmp_path / "never-added"), "on")
    assert never.returncode == 2
    assert never.stderr.strip().splitlines() == [
        f"llm-workstation: not an added folder: {tmp_path / 'never-added'} (docs add {tmp_path / 'never-added'} "
        "--watch adds and watches it)"
    ]
    assert cli("watch", str(folder), "on", "--collection", "nope").returncode == 2
    assert cli("remove", str(folder)).returncode == 0
    assert json.loads(cli("list", "--json").stdout)["collections"][0]["watched"] == []  # went with its folder


def test_collections_keep_their_files_apart_and_remove(folder: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.md"
    other.write_text("The okapi lives in forests.")
    cli("add", str(folder))
    assert cli("add", str(other), "--collection", "zoo").returncode == 0
    hits = json.loads(cli("search", "okapi", "--collection", "zoo", "--json").stdout)["hits"]
    assert [Path(h["path"]).name for h in hits] == ["other.md"]
    removed = cli("remove", str(folder / "guide.pdf"))
    assert (removed.returncode, removed.stdout.strip()) == (0, "removed 1 file")
    assert json.loads(cli("search", "okapi", "--json").stdout)["hits"][0]["path"] == str(other)
    assert cli("remove", "--collection", "zoo").stdout.strip() == "removed collection 'zoo' (1 files)"
    assert json.loads(cli("search", "okapi", "--json").stdout)["hits"] == []
    assert cli("remove", str(tmp_path / "never-added.md")).returncode == 2
    assert cli("remove").returncode == 2


def test_a_path_that_does_not_exist_exits_2_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pdf"
    result = cli("add", str(missing))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"llm-workstation: no such file or folder: {missing}"]
    assert cli("list", "--collection", "nope").returncode == 2


def test_a_kill_during_indexing_loses_only_the_file_in_flight_and_a_rerun_resumes(tmp_path: Path) -> None:
    docs = tmp_path / "many"
    docs.mkdir()
    for n in range(12):
        write_pdf(docs / f"report{n:02}.pdf", [page_text(f"topic{n}a"), page_text(f"topic{n}b")])
    for n in range(30):
        (docs / f"note{n:02}.txt").write_text(page_text(f"note{n}", 400))
    names = sorted(path.name for path in docs.iterdir())
    proc = subprocess.Popen([sys.executable, "-m", "app", "docs", "add", str(docs)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # the first file's commit: its "indexed" line comes after the transaction
        if " indexed " in line:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    proc.stderr.close()
    with sqlite3.connect(_db()) as db:
        committed = {Path(p).name for (p,) in db.execute("SELECT path FROM files WHERE state = 'indexed'")}
    assert 1 <= len(committed) < len(names), "the kill came after the whole run"
    rerun = cli("add", str(docs))
    assert rerun.returncode == 0, rerun.stderr
    started = {Path(line.split()[-1]).name for line in rerun.stderr.splitlines() if " started " in line}
    assert started == set(names) - committed  # what was committed is not read again
    with sqlite3.connect(_db()) as db:
        rows = db.execute("SELECT path, state, chunk_count FROM files ORDER BY path").fetchall()
        assert [Path(p).name for p, _, _ in rows] == names and {s for _, s, _ in rows} == {"indexed"}
        per_file = dict(
            db.execute(
                "SELECT f.path, count(c.id) FROM files f JOIN chunks c ON c.file_id = f.id GROUP BY f.id"
            ).fetchall()
        )
        assert all(per_file[path] == count for path, _, count in rows)
        duplicates = db.execute(
            "SELECT count(*) FROM (SELECT file_id, text FROM chunks GROUP BY file_id, ordinal HAVING count(*) > 1)"
        ).fetchone()[0]
        assert duplicates == 0
        assert db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == sum(c for _, _, c in rows)


def test_ctrl_c_stops_cleanly_and_keeps_what_was_committed(tmp_path: Path) -> None:
    docs = tmp_path / "slow"
    docs.mkdir()
    (docs / "a.txt").write_text("First file, indexed before the interrupt.")
    (docs / "b.html").write_text("<div><p>word <b>x</b></p></div>" * 600_000)  # seconds of parsing
    proc = subprocess.Popen([sys.executable, "-m", "app", "docs", "add", str(docs)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "started" in line and "b.html" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(30) == 130
    assert "stopped: what was indexed is kept" in rest
    listed = json.loads(cli("list", "--json").stdout)["collections"][0]["files"]
    assert {Path(f["path"]).name: f["state"] for f in listed} == {"a.txt": "indexed", "b.html": "pending"}


def _without_read_override() -> list[str]:
    """An argv prefix under which a file without read permission cannot be read: none for a normal user; for root,
    ``setpriv`` without the capabilities that let root read anything (skips when it is missing)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: a file without read permission is readable")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]


def test_a_file_without_read_permission_is_reported_and_the_rest_indexed(tmp_path: Path) -> None:
    docs = tmp_path / "perm"
    docs.mkdir()
    (docs / "open.md").write_text("The open file mentions the lynx.")
    secret = docs / "secret.md"
    secret.write_text("The secret file.")
    secret.chmod(0)
    argv = [*_without_read_override(), sys.executable, "-m", "app", "docs", "add", str(docs)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert f"failed {secret}: permission denied" in result.stderr
    assert f"indexed {docs / 'open.md'}" in result.stderr
    listed = json.loads(cli("list", "--json").stdout)["collections"][0]["files"]
    assert {Path(f["path"]).name: f["reason"] for f in listed} == {"open.md": None, "secret.md": "permission denied"}


def test_the_index_lives_owner_only_in_the_data_folder(folder: Path) -> None:
    assert cli("add", str(folder / "notes.md")).returncode == 0
    assert (_db().stat().st_mode & 0o777) == 0o600 and (_db().parent.stat().st_mode & 0o777) == 0o700
