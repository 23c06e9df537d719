"""`kittiwake auth`: manage the broker's auth file — users, tokens, rights — without hashing by hand.

    kittiwake auth add-user alice --rights 'alice.*=all' --file users.json
    kittiwake auth set-rights alice --rights 'alice.*=produce,consume' --file users.json
    kittiwake auth new-token alice --file users.json
    kittiwake auth sqs-secret alice --file users.json
    kittiwake auth remove-user alice --file users.json
    kittiwake auth list-users --file users.json

`add-user` and `new-token` print a generated token once (or take `--token`);
only its scrypt hash is written. `sqs-secret` prints a generated secret
access key for the SQS API (`--sqs-port`), kept as it is in the file. The file is replaced atomically with mode
0600, and a running broker picks the change up within a second. `--file`
defaults to `$KITTIWAKE_AUTH_FILE`. See `kittiwake.broker.users` for the format.
"""

from __future__ import annotations

from types import ModuleType
from urllib.parse import quote

import click

from kittiwake.cli.context import CliContext, pass_cli
from kittiwake.cli.output import print_json, print_table, say


def _users_module() -> ModuleType:
    from kittiwake.broker import users

    return users


file_option = click.option(
    "--file", "path", required=True, envvar="KITTIWAKE_AUTH_FILE", show_envvar=True, type=click.Path(dir_okay=False),
    help="The auth file (created by the first add-user).",
)
rights_option = click.option(
    "--rights", "rights", multiple=True, metavar="PATTERN=PERMS",
    help="Permissions on the queues matching a glob, e.g. 'alice.*=produce,consume,admin' or 'alice.*=all'; repeat "
    "for more patterns.",
)


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


def _show_token(name: str, token: str) -> None:
    say(f"token of {name} (shown once, keep it secret): {token}")
    say(f"connect with: kw://{quote(name, safe='')}:{quote(token, safe='')}@HOST:PORT  (kws:// for TLS)")


@click.group("auth")
def auth() -> None:
    """Manage the users of a broker's --auth-file."""


@auth.command("add-user")
@click.argument("name")
@rights_option
@click.option("--token", help="Use this token (16..256 printable characters) instead of a generated one.")
@click.option("--replace", is_flag=True, help="Replace the user if it exists (new token, new rights).")
@file_option
def add_user(name: str, rights: tuple[str, ...], token: str | None, replace: bool, path: str) -> None:
    """Add user NAME with a new token and the given rights."""
    users = _users_module()
    try:
        users.validate_user(name)
        grants = users.parse_rights_options(rights)
        if token is not None:
            users.validate_token(token)
        table = users.load_or_empty(path)
        if name in table and not replace:
            raise users.UserFileError(f"user {name!r} exists: use --replace, set-rights or new-token")
        secret = token if token is not None else users.new_token()
        table[name] = users.UserRecord(name, users.TokenHash.of(secret), grants)
        users.save_users(path, table)
    except users.UserFileError as exc:
        raise _fail(exc) from None
    if token is None:
        _show_token(name, secret)
    else:
        say(f"user {name} saved")


@auth.command("set-rights")
@click.argument("name")
@rights_option
@file_option
def set_rights(name: str, rights: tuple[str, ...], path: str) -> None:
    """Replace the rights of user NAME (its token stays)."""
    users = _users_module()
    try:
        table = users.load_users(path)
        if name not in table:
            raise users.UserFileError(f"no user {name!r} in {path}")
        table[name] = users.UserRecord(name, table[name].token_hash, users.parse_rights_options(rights),
                                       table[name].sqs_secret)
        users.save_users(path, table)
    except users.UserFileError as exc:
        raise _fail(exc) from None
    say(f"rights of {name} saved")


@auth.command("new-token")
@click.argument("name")
@click.option("--token", help="Use this token instead of a generated one.")
@file_option
def new_token(name: str, token: str | None, path: str) -> None:
    """Give user NAME a new token; the old one stops working for new connections."""
    users = _users_module()
    try:
        if token is not None:
            users.validate_token(token)
        table = users.load_users(path)
        if name not in table:
            raise users.UserFileError(f"no user {name!r} in {path}")
        secret = token if token is not None else users.new_token()
        table[name] = users.UserRecord(name, users.TokenHash.of(secret), table[name].grants, table[name].sqs_secret)
        users.save_users(path, table)
    except users.UserFileError as exc:
        raise _fail(exc) from None
    if token is None:
        _show_token(name, secret)
    else:
        say(f"token of {name} saved")


@auth.command("sqs-secret")
@click.argument("name")
@click.option("--secret", help="Use this secret (16..256 printable characters) instead of a generated one.")
@click.option("--remove", is_flag=True, help="Take the user's SQS secret away: its signatures stop working.")
@file_option
def sqs_secret(name: str, secret: str | None, remove: bool, path: str) -> None:
    """Give user NAME a secret access key for the broker's SQS API (access key id = NAME)."""
    users = _users_module()
    try:
        if secret is not None:
            users.validate_token(secret)
        table = users.load_users(path)
        if name not in table:
            raise users.UserFileError(f"no user {name!r} in {path}")
        chosen = None if remove else (secret if secret is not None else users.new_token())
        record = table[name]
        table[name] = users.UserRecord(name, record.token_hash, record.grants, chosen)
        users.save_users(path, table)
    except users.UserFileError as exc:
        raise _fail(exc) from None
    if chosen is None:
        say(f"SQS secret of {name} removed")
    elif secret is None:
        say(f"SQS secret access key of {name} (shown once, keep it secret): {chosen}")
        say(f"use with: AWS_ACCESS_KEY_ID={name} AWS_SECRET_ACCESS_KEY=<the secret>, endpoint http://HOST:SQS_PORT")
    else:
        say(f"SQS secret of {name} saved")


@auth.command("remove-user")
@click.argument("name")
@file_option
def remove_user(name: str, path: str) -> None:
    """Remove user NAME; its open connections last until they close."""
    users = _users_module()
    try:
        table = users.load_users(path)
        if table.pop(name, None) is None:
            raise users.UserFileError(f"no user {name!r} in {path}")
        users.save_users(path, table)
    except users.UserFileError as exc:
        raise _fail(exc) from None
    say(f"user {name} removed")


@auth.command("list-users")
@file_option
@pass_cli
def list_users(cli: CliContext, path: str) -> None:
    """List the users and their rights (never tokens); `kittiwake --json auth list-users` for JSON."""
    users = _users_module()
    try:
        table = users.load_users(path)
    except users.UserFileError as exc:
        raise _fail(exc) from None
    rows = [{"user": name, "rights": record.rights_json()} for name, record in sorted(table.items())]
    if cli.json:
        print_json(rows)
        return
    if not rows:
        say("no users")
        return
    print_table(
        None,
        ("user", "queues", "permissions"),
        (
            (row["user"] if index == 0 else "", pattern, ",".join(permissions))
            for row in rows
            for index, (pattern, permissions) in enumerate(row["rights"].items() or [("-", [])])
        ),
    )
