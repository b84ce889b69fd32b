"""rigging.filesystem.copy_file: a whole copy on every store (inside a bucket, the store copies)."""

from __future__ import annotations

from pathlib import Path

from rigging import filesystem as fs


def test_copy_file_locally_leaves_no_temporary_and_replaces_the_target(tmp_path: Path) -> None:
    fs.atomic_write(str(tmp_path / "a" / "x.bin"), b"\x00payload")
    fs.atomic_write(str(tmp_path / "b" / "deep" / "y.bin"), b"old")
    fs.copy_file(str(tmp_path / "a" / "x.bin"), str(tmp_path / "b" / "deep" / "y.bin"))
    assert (tmp_path / "b" / "deep" / "y.bin").read_bytes() == b"\x00payload"
    assert sorted(p.name for p in (tmp_path / "b" / "deep").iterdir()) == ["y.bin"]


def test_copy_file_inside_a_bucket_and_across_stores(gcs_bucket: str, memory_prefix: str, tmp_path: Path) -> None:
    fs.atomic_write(f"{gcs_bucket}/a/x.txt", b"hello")
    fs.copy_file(f"{gcs_bucket}/a/x.txt", f"{gcs_bucket}/b/y.txt")
    fs.copy_file(f"{gcs_bucket}/b/y.txt", f"{memory_prefix}/z.txt")
    fs.copy_file(f"{memory_prefix}/z.txt", f"{memory_prefix}/w.txt")
    fs.copy_file(f"{memory_prefix}/w.txt", str(tmp_path / "local.txt"))
    assert fs.read_bytes(f"{gcs_bucket}/b/y.txt") == fs.read_bytes(str(tmp_path / "local.txt")) == b"hello"
