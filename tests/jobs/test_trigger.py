"""A folder trigger's files: complete ones only (a ``_SUCCESS``, or whole by themselves), each once;
the job ids a trigger makes. Real files on disk; no Kafka."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streamer.config import LakeConfig
from streamer.config_check import Location
from streamer.jobs.trigger import complete_files, folder_job_id, snapshot_job_id


def lake(tmp_path: Path) -> LakeConfig:
    return LakeConfig(warehouse=Location(str(tmp_path / "lake")))


def parquet(path: Path, n: int = 100) -> bytes:
    """A whole Parquet file of ``n`` rows at ``path``; its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"x": list(range(n))}), path)
    return path.read_bytes()


def test_a_half_written_file_waits_until_it_is_whole_or_its_folder_has_success(tmp_path: Path) -> None:
    folder = tmp_path / "incoming"
    parquet(folder / "a.parquet")
    whole = parquet(folder / "b.parquet", 5000)
    (folder / "b.parquet").write_bytes(whole[: len(whole) // 2])  # a writer still writing: no footer yet
    (folder / "c.parquet").write_bytes(b"PAR1" + whole[4:200] + b"PAR1")  # both magics, no footer that parses
    parquet(folder / "_temporary" / "d.parquet")  # a writer's scratch: never a file of the folder
    parquet(folder / ".e.parquet")
    (folder / "notes.txt").write_text("not Parquet")
    a, b, c = (str(folder / n) for n in ("a.parquet", "b.parquet", "c.parquet"))

    assert complete_files(lake(tmp_path), str(folder), set()) == [a]
    assert complete_files(lake(tmp_path), str(folder), {a}) == []
    (folder / "b.parquet").write_bytes(whole)  # finished
    assert complete_files(lake(tmp_path), str(folder), {a}) == [str(folder / "b.parquet")]
    (folder / "_SUCCESS").write_text("")  # the writer says every file is done
    assert complete_files(lake(tmp_path), str(folder), set()) == [a, b, c]
    assert complete_files(lake(tmp_path), str(tmp_path / "nothing-yet"), set()) == []


def test_success_in_a_dataset_s_root_completes_its_partition_folders_and_no_other(tmp_path: Path) -> None:
    root = tmp_path / "drop"
    done, open_ = root / "2026-12-01", root / "2026-12-02"
    half = parquet(done / "part-0.parquet")
    (done / "part-0.parquet").write_bytes(half[:-8])
    half = parquet(open_ / "part-0.parquet")
    (open_ / "part-0.parquet").write_bytes(half[:-8])
    (done / "_SUCCESS").write_text("")
    assert complete_files(lake(tmp_path), str(root), set()) == [str(done / "part-0.parquet")]
    (root / "_SUCCESS").write_text("")
    assert complete_files(lake(tmp_path), str(root), set()) == [str(done / "part-0.parquet"),
                                                                 str(open_ / "part-0.parquet")]


def test_job_ids_say_the_trigger_s_name_and_its_increment() -> None:
    assert snapshot_job_id("nightly", 4711) == "nightly-s4711"
    files = ["/in/b.parquet", "/in/a.parquet"]
    digest = hashlib.sha256(b"/in/a.parquet\n/in/b.parquet").hexdigest()[:12]
    assert folder_job_id("nightly", files) == folder_job_id("nightly", files[::-1]) == f"nightly-f{digest}"
    assert folder_job_id("nightly", files[:1]) != folder_job_id("nightly", files)
