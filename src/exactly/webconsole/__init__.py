"""The web console (`exactly console`): topics and partitions, transactions with the in-doubt
two-phase-commit ones first (KIP-939), hanging transactions (KIP-664), consumer groups and
producers, refreshed by themselves; and the two operator actions, force-terminate and abort,
behind a confirmation and the broker's ACLs.

- `gather`: what the pages show, read with Exactly's async Admin client;
- `actions`: force-terminate and abort, run with the acting user's credentials;
- `sessions`: the browser's CSRF token and login, in memory;
- `app`: the Starlette application, its Jinja2 templates and static files (htmx, vendored).

It is an extra (`pip install 'exactly[console]'`): nothing here is imported by the broker or the
client. Why a console at all: Kafka's web UIs show topics and groups, and none shows prepared
transactions, which an operator of two-phase commit must see and sometimes end.
"""
