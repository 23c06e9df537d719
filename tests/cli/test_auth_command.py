"""`kittiwake auth`: users written by the command work against a real broker; the file holds no token."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kittiwake import Client, errors
from kittiwake.broker.users import load_users
from support.broker_process import BrokerProcess


def auth(*args: str, file: Path) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "KITTIWAKE_AUTH_FILE"}
    return subprocess.run([sys.executable, "-m", "kittiwake", *args, "--file", str(file)],
                          capture_output=True, text=True, timeout=60, env=environment)


def token_in(output: str) -> str:
    match = re.search(r"keep it secret\): (\S+)", output)
    assert match, output
    return match.group(1)


def eventually_lease(url: str, queue: str, timeout: float = 30.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Client(url) as client:
                return client.lease(queue)
        except (errors.Unauthorized, errors.Forbidden):
            assert time.monotonic() < deadline, "the broker did not take the changed auth file"
            time.sleep(0.2)


def test_add_user_prints_a_token_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    done = auth("auth", "add-user", "alice", "--rights", "alice.*=all", "--rights", "shared.in=produce", file=users)
    assert done.returncode == 0, done.stderr
    token = token_in(done.stdout)
    assert len(token) >= 40 and f"kw://alice:{token}@HOST:PORT" in done.stdout
    text = users.read_text()
    assert token not in text
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    document = json.loads(text)
    assert document["users"]["alice"]["rights"] == {"alice.*": ["produce", "consume", "admin"], "shared.in": ["produce"]}
    assert document["users"]["alice"]["token_hash"].startswith("scrypt:16384:8:1:")
    assert load_users(users)["alice"].token_hash.verify(token)


def test_the_commands_manage_users_a_running_broker_accepts(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    assert auth("auth", "add-user", "root", "--rights", "*=all", "--token", "root-token-0123456789", file=users).returncode == 0
    token = token_in(auth("auth", "add-user", "alice", "--rights", "alice.*=produce", file=users).stdout)
    with BrokerProcess(tmp_path / "data", auth_file=users) as broker:
        with Client(broker.client_url("alice", token)) as alice:
            alice.enqueue("alice.jobs", b"x")
            with pytest.raises(errors.Forbidden):
                alice.lease("alice.jobs")  # alice may only produce
        done = auth("auth", "add-user", "alice", "--rights", "alice.*=all", file=users)
        assert done.returncode == 1 and "exists" in done.stderr
        assert auth("auth", "set-rights", "alice", "--rights", "alice.*=all", file=users).returncode == 0
        new_token = token_in(auth("auth", "new-token", "alice", file=users).stdout)
        assert new_token != token
        # the broker re-reads the file (looked at once a second): the new token and rights
        # work on new connections
        assert [task.data for task in eventually_lease(broker.client_url("alice", new_token), "alice.jobs")] == [b"x"]
        listed = subprocess.run([sys.executable, "-m", "kittiwake", "--json", "auth", "list-users", "--file", str(users)],
                                capture_output=True, text=True, timeout=60)
        assert json.loads(listed.stdout) == [
            {"user": "alice", "rights": {"alice.*": ["produce", "consume", "admin"]}},
            {"user": "root", "rights": {"*": ["produce", "consume", "admin"]}},
        ]
        assert auth("auth", "remove-user", "alice", file=users).returncode == 0
        assert "alice" not in load_users(users)


def test_bad_arguments_are_refused_with_the_reason(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    for args, reason in [
        (("auth", "add-user", "al ice", "--rights", "a=all"), "user name"),
        (("auth", "add-user", "alice", "--rights", "a"), "PATTERN=produce"),
        (("auth", "add-user", "alice", "--rights", "a=read"), "unknown permission 'read'"),
        (("auth", "add-user", "alice", "--rights", "a[b]=all"), "wildcards"),
        (("auth", "add-user", "alice", "--rights", "a=all", "--token", "short"), "16..256"),
        (("auth", "set-rights", "nobody", "--rights", "a=all"), "cannot read the auth file"),
    ]:
        done = auth(*args, file=users)
        assert done.returncode != 0 and reason in done.stderr, (args, done.stderr)
    assert not users.exists()
