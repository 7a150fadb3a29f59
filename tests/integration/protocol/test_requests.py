"""exactly.protocol.requests: its generated block is what regenerating it gives, its unions make
mypy check a field against every supported version, and importing the handlers loads none of the
kio classes they name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from mypy import api as mypy_api

from exactly.protocol import requests
from tests.paths import SRC


def test_generated_block_is_current() -> None:
    text = Path(requests.__file__).read_text()
    assert requests.generated_block(text) == requests.render(), (
        "src/exactly/protocol/requests.py is stale: run `python -m exactly.protocol.requests`")


def test_mypy_checks_a_field_against_every_version(tmp_path: Path, monkeypatch) -> None:
    """Fetch v4-v6 have no session id (KIP-227 came with v7): reading it is an error for exactly
    those versions; a field every version has is not."""
    source = tmp_path / "handler.py"
    source.write_text(textwrap.dedent("""\
        from __future__ import annotations

        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from exactly.protocol.requests import FetchRequest


        def sizes(request: FetchRequest) -> tuple[int, int]:
            return request.max_bytes, request.session_id
        """))
    monkeypatch.setenv("MYPYPATH", str(SRC))
    out, err, status = mypy_api.run(["--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                                     "--config-file", os.devnull, str(source)])
    assert status == 1, out + err
    lines = out.splitlines()
    assert all("has no attribute \"session_id\"" in line for line in lines), out
    assert sorted(line.split('"')[1] for line in lines) == [
        f"kio.schema.fetch.v{v}.request.FetchRequest" for v in (4, 5, 6)]


def test_importing_the_handlers_loads_no_request_class() -> None:
    code = textwrap.dedent("""\
        import sys

        import exactly.server.handlers
        from exactly.protocol.apis import SUPPORTED, api_name

        loaded = set(sys.modules)
        print(sorted(f"kio.schema.{api_name(key)}.v{v}.request"
                     for key, (low, high) in SUPPORTED.items() for v in range(low, high + 1)
                     if f"kio.schema.{api_name(key)}.v{v}.request" in loaded))
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
