"""Start-up failures a user can act on, with the words for them: the CLI prints `error: ...`
and exits 1 (the environment is at fault) instead of a traceback."""

from __future__ import annotations

import errno
import socket


class StartupError(RuntimeError):
    """The broker cannot start here; the message says why and what to do."""


def listen_error(key: str, host: str, port: int, exc: OSError) -> StartupError:
    """Why binding `host:port` (the value of `key`) failed, in words."""
    where = f"cannot listen on {host}:{port} ({key})"
    if isinstance(exc, socket.gaierror):
        return StartupError(f"{where}: {host!r} is not a known host name")
    if exc.errno == errno.EADDRINUSE:
        return StartupError(f"{where}: the address is in use; stop the process using it or "
                            f"choose another port in {key}")
    if exc.errno == errno.EADDRNOTAVAIL:
        return StartupError(f"{where}: the address is not one of this machine's")
    if exc.errno == errno.EACCES:
        return StartupError(f"{where}: permission denied (ports below 1024 need privileges)")
    return StartupError(f"{where}: {exc.strerror or exc}")


def data_dir_error(directory: object, exc: OSError) -> StartupError:
    """Why the data directory cannot be used, in words."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        why = "it is a file, not a directory"
    elif isinstance(exc, PermissionError):
        why = "permission denied"
    elif exc.errno == errno.EROFS:
        why = "the file system is read-only"
    else:
        why = exc.strerror or str(exc)
    return StartupError(f"cannot use data directory {directory}: {why}")
