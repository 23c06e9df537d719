"""The data directory is made durable: every new name synced in its parent, so a power cut keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kittiwake.store.durable_directory import make_durable_directory
from support.lazy_mount import LazyMount, require_fuse


def test_makes_missing_parents_and_returns_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    made = make_durable_directory(Path("a") / "b" / "c")
    assert made == tmp_path / "a" / "b" / "c" and made.is_dir()
    assert make_durable_directory(made) == made  # there already: fine


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(FileExistsError):
        make_durable_directory(tmp_path / "file")


def test_every_level_it_makes_survives_a_power_cut(tmp_path: Path) -> None:
    require_fuse()
    with LazyMount(tmp_path / "disk", tmp_path / "mnt") as mount:
        make_durable_directory(mount.path / "a" / "b")
        (mount.path / "a" / "unsynced").mkdir()  # made the plain way: gone after the cut
        report = mount.cut()
        mount.mount()
        assert (mount.path / "a" / "b").is_dir()
        assert not (mount.path / "a" / "unsynced").exists()
        assert report["name_changes_undone"] == 1
