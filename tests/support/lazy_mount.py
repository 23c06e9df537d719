"""A lazy filesystem mounted for a test: start it, cut the power, mount it again, always unmount.

`LazyMount(backing, mountpoint)` runs `support.lazyfs` in a child process and
waits until the mount answers. `cut()` simulates a power cut: the child drops
every unsynced write (or, torn, lets a random share through) and undoes the
names whose directory was not synced, then dies, and the dead mount is
detached; `mount()` brings the filesystem back on the same backing directory,
which now holds only what survived. `close()` (also on `with` exit) unmounts
and stops the child whatever state it is in; the child mounts with
`auto_unmount`, so even a test killed outright leaves no mount behind.

`fuse_unavailable()` says why a mount cannot work here (None when it can);
`require_fuse()` skips a test with that reason, or fails it under CI=true,
where every test must run.
"""

from __future__ import annotations

import functools
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).resolve().parent.parent
MOUNT_TIMEOUT_SECS = 15.0
STOP_TIMEOUT_SECS = 10.0
ANSWER_TIMEOUT_SECS = 60.0  # a cut applies a torn share of every unsynced block first


@functools.cache
def fuse_unavailable() -> str | None:
    """Why no lazy filesystem can be mounted on this machine, or None if one can (probed once)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "fusermount3 is missing: install the fuse3 package (`make fuse-deps` as root)"
    try:
        import mfusepy  # noqa: F401  (loads libfuse through ctypes)
    except ImportError:
        return "the mfusepy package is missing (it is pinned in requirements.lock)"
    except OSError as exc:
        return f"libfuse cannot be loaded ({exc}): install libfuse3-3 (`make fuse-deps` as root)"
    with tempfile.TemporaryDirectory(prefix="lazyfs-probe-") as scratch:
        try:
            with LazyMount(Path(scratch) / "backing", Path(scratch) / "mount") as mount:
                probe = mount.path / "probe"
                probe.write_bytes(b"x")
                if probe.read_bytes() != b"x":
                    return "a file written on the lazy filesystem read back differently"
        except (OSError, RuntimeError) as exc:
            return f"a FUSE mount failed here: {exc}"
    return None


def require_fuse() -> None:
    """Skip the calling test where no FUSE mount can work, with the reason; under CI=true, fail it."""
    reason = fuse_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and a lazy filesystem cannot be mounted: {reason}")
    pytest.skip(f"needs a FUSE mount for the lazy filesystem: {reason}")


class LazyMount:
    """`support.lazyfs` mounted on `mountpoint` over `backing` (both created if missing)."""

    def __init__(self, backing: str | os.PathLike[str], mountpoint: str | os.PathLike[str]) -> None:
        self.backing = Path(backing)
        self.path = Path(mountpoint)
        self.log_path = self.path.with_name(self.path.name + ".lazyfs.log")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[str] | None = None
        self.cuts: list[dict[str, Any]] = []  # what each cut reported
        self.mount()

    def mount(self) -> None:
        """Start the filesystem and wait until the mount answers."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("the lazy filesystem is already mounted")
        self._detach()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "support.lazyfs", str(self.backing), str(self.path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT_SECS
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the lazy filesystem exited with {self.proc.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(
                    f"the lazy filesystem did not mount within {MOUNT_TIMEOUT_SECS} s\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def stats(self) -> dict[str, Any]:
        """The filesystem's counters (writes, fsyncs, directory fsyncs, name changes ...)."""
        return self._ask("stats")

    def cut(self, rng: random.Random | None = None, *, torn_share: float = 0.0) -> dict[str, Any]:
        """A power cut. With `rng` and `torn_share` > 0, each unsynced block reaches the disk with
        that probability first; otherwise nothing unsynced does. Returns what the filesystem
        reported (bytes dropped and kept, name changes undone, counters); the mount is dead after."""
        if not 0.0 <= torn_share <= 1.0:
            raise ValueError(f"torn_share must be in [0, 1], got {torn_share}")
        if rng is not None and torn_share > 0.0:
            command = f"cut torn {rng.randrange(2**32)} {torn_share}"
        else:
            command = "cut"
        report = self._ask(command)
        assert self.proc is not None
        self.proc.wait(timeout=STOP_TIMEOUT_SECS)
        self._detach()
        self.cuts.append(report)
        return report

    def close(self) -> None:
        """Unmount and stop the filesystem (unsynced data is dropped, as at a cut)."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_SECS)
        finally:
            if self.proc is not None:
                for stream in (self.proc.stdin, self.proc.stdout):
                    if stream is not None:
                        stream.close()
            self._detach()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no lazyfs log)"

    def _ask(self, command: str) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"the lazy filesystem is not running\n{self.log_tail()}")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        # one line answers each command, so nothing waits in the reader's buffer before this select
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_TIMEOUT_SECS)
        if not ready:
            raise RuntimeError(f"the lazy filesystem did not answer {command!r} in {ANSWER_TIMEOUT_SECS} s")
        line = self.proc.stdout.readline()
        word, _, payload = line.partition(" ")
        if word != command.split()[0]:
            raise RuntimeError(f"the lazy filesystem answered {line!r} to {command!r}\n{self.log_tail()}")
        return json.loads(payload)

    def _detach(self) -> None:
        """Take the mount away if it is still there, alive or dead (lazily: nothing may hold it up)."""
        if not _mounted(self.path):
            return
        for command in (["fusermount3", "-u", "-z"], ["fusermount", "-u", "-z"], ["umount", "-l"]):
            if shutil.which(command[0]) is None:
                continue
            subprocess.run([*command, str(self.path)], capture_output=True, timeout=STOP_TIMEOUT_SECS)
            if not _mounted(self.path):
                return
        raise RuntimeError(f"could not unmount {self.path}")

    def __enter__(self) -> LazyMount:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _mounted(path: Path) -> bool:
    """True if something is mounted on `path`, even a dead FUSE mount that `os.path.ismount` misses."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as mounts:
        return any(line.split()[4] == target for line in mounts)
