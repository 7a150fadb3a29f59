"""`exactly users ...`: SCRAM credentials (KIP-554), as `kafka-configs.sh --alter
--add-config SCRAM-SHA-256=[...] --entity-type users` does. The password is salted and hashed
here (PBKDF2-HMAC with a random salt); only the salted password reaches the broker."""

from __future__ import annotations

import click

from exactly.cli.common import (
    admin_call,
    connection_options,
    open_admin,
    print_table,
)
from exactly.client.admin import (
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]

mechanism_option = click.option(
    "--mechanism", type=click.Choice(MECHANISMS, case_sensitive=False), required=True,
    help="The SCRAM mechanism of the credential.")


@click.group()
def users() -> None:
    """Manage users' SCRAM credentials."""


@users.command("add-scram")
@connection_options
@click.option("--user", required=True, help="The user name (the principal is User:NAME).")
@mechanism_option
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True,
              help="The password (asked for when not given).")
@click.option("--iterations", type=click.IntRange(min=4096, max=16384), default=4096,
              show_default=True, help="PBKDF2 iterations.")
def add_scram(bootstrap: str, command_config: str | None, timeout_ms: int, user: str, mechanism: str,
              password: str, iterations: int) -> None:
    """Create or replace a user's SCRAM credential."""
    if not password:
        raise click.BadParameter("must not be empty", param_hint="--password")
    upsert = UserScramCredentialUpsertion(user, ScramMechanism.parse(mechanism), password, iterations)
    with open_admin(bootstrap, command_config, "exactly-users", timeout_ms) as admin:
        admin_call(f"add {mechanism} credential of {user!r}",
                   lambda: admin.alter_user_scram_credentials([upsert]))
    click.echo(f"Set the {mechanism.upper()} credential of user {user!r} ({iterations} iterations).")


@users.command("remove-scram")
@connection_options
@click.option("--user", required=True, help="The user name.")
@mechanism_option
def remove_scram(bootstrap: str, command_config: str | None, timeout_ms: int, user: str, mechanism: str) -> None:
    """Remove a user's SCRAM credential for one mechanism."""
    deletion = UserScramCredentialDeletion(user, ScramMechanism.parse(mechanism))
    with open_admin(bootstrap, command_config, "exactly-users", timeout_ms) as admin:
        admin_call(f"remove {mechanism} credential of {user!r}",
                   lambda: admin.alter_user_scram_credentials([deletion]))
    click.echo(f"Removed the {mechanism.upper()} credential of user {user!r}.")


@users.command("describe")
@connection_options
@click.option("--user", "names", multiple=True, help="Only this user. Repeatable.")
def describe(bootstrap: str, command_config: str | None, timeout_ms: int, names: tuple[str, ...]) -> None:
    """List users' SCRAM mechanisms and iteration counts."""
    with open_admin(bootstrap, command_config, "exactly-users", timeout_ms) as admin:
        found = admin_call("describe SCRAM credentials",
                           lambda: admin.describe_user_scram_credentials(list(names) or None))
    print_table(("User", "Mechanism", "Iterations"),
                sorted((u, c.mechanism.mechanism_name, c.iterations)
                       for u, creds in found.items() for c in creds))
