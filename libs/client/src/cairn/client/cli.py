"""`cairn`: the command line for Cairn, and for any Oxia-compatible server.

    cairn [--address HOST:PORT] [--namespace NS] [--timeout-s S] [--json] COMMAND ...

    get KEY                 the record's value (raw bytes); --json: value and version
    put KEY [VALUE]         the value from VALUE, --value-file or stdin
    delete KEY
    delete-range START END
    list START END          keys, one per line, in key order
    range START END         records, one per line: key<TAB>value
    watch                   notifications as they arrive, until Ctrl-C
    sequence-updates KEY    the highest sequence key under KEY as it changes, until Ctrl-C
    status                  the cluster from its controller's admin API; with no
                            controller, the shard map of --address and each shard's
                            request counters
    admin ACTION ...        the cluster through its controller: views (nodes, shards,
                            elections, namespaces) and changes (drain, undrain,
                            replication-factor, move-leader, storage-pods; `--wait`)
    perf                    a load generator (`cairn perf --help`), when cairn-kv-bench
                            is installed

Global options work before or after the command; `--address` and `--namespace`
default to $CAIRN_ADDRESS and $CAIRN_NAMESPACE. With `--json`, single answers are
one JSON object and streams (list, range, watch) are JSON lines. A value that is
not UTF-8 appears as `value_base64` instead of `value`.

Exit status:
    0    success (also a watch, sequence-updates or ephemeral put ended by Ctrl-C)
    1    no such record (get, delete)
    2    usage error, or the server refused the request as invalid
    3    unexpected version: a conditional put or delete did not apply
    4    unavailable: no answer within --timeout-s, or a write's outcome is unknown
    5    any other failure (no such namespace, session expired, notifications trimmed)
    130  interrupted
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from cairn.client import DISTRIBUTION, errors
from cairn.client.cli_admin import AdminError, add_admin_commands, admin_command
from cairn.client.cli_output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_UNEXPECTED_VERSION,
    EXIT_USAGE,
    Output,
    notification_document,
    notification_line,
    record_document,
    text_of,
    version_document,
)
from cairn.client.cli_status import status_command
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.client.records import Comparison
from cairn.common.hashing import KeyHash
from cairn.common.tls import TlsConfigError, TlsFiles
from cairn.common.version import add_version_option

DEFAULT_ADDRESS = "127.0.0.1:6648"
DEFAULT_NAMESPACE = "default"
DEFAULT_ADMIN_URL = "http://127.0.0.1:6650"
DEFAULT_TIMEOUT_S = 10.0
# `status` asks the controller first; one that does not answer this fast is
# taken as absent (the storage servers are asked instead).
CONTROLLER_TIMEOUT_S = 3.0


class UsageError(Exception):
    """A command line that parses but does not make sense."""


def exit_code_of(error: BaseException) -> int:
    if isinstance(error, errors.KeyNotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, errors.InvalidArgument | UsageError):
        return EXIT_USAGE
    if isinstance(error, errors.UnexpectedVersion):
        return EXIT_UNEXPECTED_VERSION
    if isinstance(error, errors.RequestTimeout | errors.OutcomeUnknown | errors.ClientClosed):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


# ---- the command line ------------------------------------------------------------------


def _add_global_options(parser: argparse.ArgumentParser, env: Mapping[str, str], top: bool) -> None:
    """The options every command takes. On the subcommands they default to
    SUPPRESS, so that a value given before the command is not overwritten."""

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--address",
        default=default(env.get("CAIRN_ADDRESS", DEFAULT_ADDRESS)),
        help="server host:port, or several comma-separated ($CAIRN_ADDRESS, "
        f"default {DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--namespace",
        default=default(env.get("CAIRN_NAMESPACE", DEFAULT_NAMESPACE)),
        help=f"namespace ($CAIRN_NAMESPACE, default {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=default(DEFAULT_TIMEOUT_S),
        help=f"deadline of each call, retries included (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--key-hash",
        choices=[h.value for h in KeyHash],
        default=default(env.get("CAIRN_KEY_HASH", KeyHash.XXH3.value)),
        help="how keys map to shards ($CAIRN_KEY_HASH, default xxh3, as the shard map says; "
        "xxh64 reaches data written by the oxia 0.2.1 Python client)",
    )
    parser.add_argument(
        "--token-file",
        default=default(env.get("CAIRN_TOKEN_FILE")),
        help="a file holding the bearer token sent with every call ($CAIRN_TOKEN_FILE; "
        "else the token itself in $CAIRN_TOKEN)",
    )
    parser.add_argument(
        "--json", action="store_true", default=default(False), help="machine-readable output"
    )
    parser.add_argument(
        "--tls-dir",
        type=Path,
        default=default(env.get("CAIRN_TLS_DIR")),
        metavar="DIR",
        help="TLS with a cert-manager style directory: ca.crt, and tls.crt/tls.key if a "
        "client certificate is wanted ($CAIRN_TLS_DIR; cairn-local prints one)",
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        default=default(None),
        metavar="PATH",
        help="TLS, checking the server by this CA file (instead of --tls-dir)",
    )
    parser.add_argument("--tls-cert", type=Path, default=default(None), metavar="PATH",
                        help="client certificate (with --tls-key)")  # fmt: skip
    parser.add_argument("--tls-key", type=Path, default=default(None), metavar="PATH",
                        help="client certificate's key (with --tls-cert)")  # fmt: skip


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="cairn",
        description="Cairn's command line (works with any Oxia-compatible server).",
        epilog="Exit status: 0 ok, 1 no such record, 2 usage or invalid request, 3 unexpected "
        "version, 4 unavailable or outcome unknown, 5 other failure, 130 interrupted.",
    )
    add_version_option(parser, DISTRIBUTION)
    _add_global_options(parser, env, top=True)
    # Read from the environment the parser was built with (tests pass their own).
    parser.set_defaults(env_token=env.get("CAIRN_TOKEN"))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        _add_global_options(sub, env, top=False)
        return sub

    def admin_url(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--admin-url",
            default=env.get("CAIRN_ADMIN_URL", DEFAULT_ADMIN_URL),
            help=f"the controller's admin API ($CAIRN_ADMIN_URL, default {DEFAULT_ADMIN_URL})",
        )

    def partition_key(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--partition-key", help="route by this key instead of the record key (one shard)"
        )

    def expected_version(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--expected-version",
            type=int,
            help="only if the record has this version id (-1: only if it does not exist)",
        )

    get = command("get", "print a record's value")
    get.add_argument("key")
    partition_key(get)
    get.add_argument(
        "--comparison",
        choices=[c.name.lower() for c in Comparison],
        default="equal",
        help="the key itself (equal), or the nearest record below or above it",
    )
    get.add_argument("--index", metavar="NAME", help="look KEY up in this secondary index")
    get.add_argument("--no-value", action="store_true", help="the version only (with --json)")
    get.set_defaults(handler=_get)

    put = command("put", "write a record")
    put.add_argument("key")
    put.add_argument("value", nargs="?", help="the value (else --value-file, else stdin)")
    put.add_argument("--value-file", metavar="PATH", help="read the value from this file")
    partition_key(put)
    expected_version(put)
    put.add_argument(
        "--ephemeral",
        action="store_true",
        help="tie the record to this command's session: it stays until Ctrl-C",
    )
    put.add_argument(
        "--sequence-key-delta",
        type=int,
        action="append",
        metavar="N",
        help="append a sequence number to the key (repeatable; needs --partition-key)",
    )
    put.add_argument(
        "--index",
        action="append",
        metavar="NAME=SECONDARY_KEY",
        help="a secondary index entry (repeatable)",
    )
    put.set_defaults(handler=_put)

    delete = command("delete", "delete a record")
    delete.add_argument("key")
    partition_key(delete)
    expected_version(delete)
    delete.set_defaults(handler=_delete)

    delete_range = command("delete-range", "delete every record with START <= key < END")
    delete_range.add_argument("start")
    delete_range.add_argument("end")
    partition_key(delete_range)
    delete_range.set_defaults(handler=_delete_range)

    for name, handler, help_text in (
        ("list", _list, "keys with START <= key < END, in key order"),
        ("range", _range, "records with START <= key < END, in key order"),
    ):
        sub = command(name, help_text)
        sub.add_argument("start")
        sub.add_argument("end")
        partition_key(sub)
        sub.add_argument("--index", metavar="NAME", help="range over this secondary index")
        if name == "list":
            sub.add_argument("--limit", type=int, help="at most this many keys")
        sub.set_defaults(handler=handler)

    watch = command("watch", "print notifications as they arrive, until Ctrl-C")
    watch.add_argument(
        "--from",
        dest="start_offsets",
        action="append",
        metavar="SHARD=OFFSET",
        help="resume a shard after this offset (repeatable); other shards start now",
    )
    watch.add_argument(
        "--prefix",
        dest="prefixes",
        action="append",
        default=[],
        metavar="PREFIX",
        help="only changes of keys with this prefix (repeatable), filtered by the server",
    )
    watch.add_argument(
        "--no-versions",
        dest="include_stat",
        action="store_false",
        help="leave out each change's version id",
    )
    watch.set_defaults(handler=_watch)

    sequence = command("sequence-updates", "print the highest sequence key under KEY as it changes")
    sequence.add_argument("key")
    sequence.add_argument("--partition-key", required=True)
    sequence.set_defaults(handler=_sequence_updates)

    status = command("status", "cluster, shards and nodes; or what --address serves")
    admin_url(status)
    status.set_defaults(handler=None)

    admin = command("admin", "see and change the cluster: nodes, shards, drain, leader, ...")
    admin.description = (
        "See and change the cluster through its controller's admin API (needs a token "
        "when the controller checks credentials). The views print tables (--json: the "
        "API's JSON); each change prints what the controller accepted, and --wait follows "
        "the cluster until the change has taken effect."
    )
    admin_url(admin)
    add_admin_commands(admin)
    admin.set_defaults(handler=None)

    perf = command("perf", "load generator: ops/s and latency percentiles per interval")
    perf_arguments = _perf_arguments()
    if perf_arguments is None:
        perf.description = (
            "A load generator for any Oxia-compatible endpoint or Cairn's REST gateway. "
            f"It comes with {PERF_DISTRIBUTION}, which is not installed here "
            f"(pip install {PERF_DISTRIBUTION})."
        )
        perf.set_defaults(perf_missing=True)
    else:
        perf.description = (
            "A load generator for any Oxia-compatible endpoint (gRPC, through the client "
            "library) or Cairn's REST gateway (http://...). Callers each do one operation at "
            "a time. Flat out (--rate 0), latency runs from each operation's start; with "
            "--rate the run is open loop: operations are scheduled at that rate and latency "
            "runs from the scheduled time, so queueing shows (no coordinated omission). "
            "Prints a line per interval and a summary (--json: the summary as JSON on "
            "stdout, the interval lines on stderr)."
        )
        perf_arguments(perf)
    perf.set_defaults(handler=None)
    return parser


# ---- output ----------------------------------------------------------------------------


# ---- the data commands -----------------------------------------------------------------

Handler = Callable[[AsyncClient, argparse.Namespace, Output], Coroutine[Any, Any, None]]


def _pairs(items: Sequence[str] | None, what: str) -> list[tuple[str, str]]:
    found = []
    for item in items or ():
        name, separator, value = item.partition("=")
        if not separator or not name:
            raise UsageError(f"{what} must look like NAME=VALUE, got {item!r}")
        found.append((name, value))
    return found


def read_value(args: argparse.Namespace, stdin: Any) -> bytes:
    if args.value is not None and args.value_file is not None:
        raise UsageError("give the value either as an argument or with --value-file, not both")
    if args.value is not None:
        return str(args.value).encode("utf-8")
    if args.value_file is not None:
        try:
            with open(args.value_file, "rb") as file:
                return file.read()
        except OSError as error:
            raise UsageError(f"cannot read {args.value_file}: {error.strerror}") from None
    if stdin is None or stdin.isatty():
        raise UsageError("no value: give VALUE, --value-file, or pipe it on stdin")
    buffer = getattr(stdin, "buffer", stdin)
    data = buffer.read()
    return data if isinstance(data, bytes) else str(data).encode("utf-8")


async def _get(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    record = await client.get(
        args.key,
        comparison=Comparison[args.comparison.upper()],
        include_value=not args.no_value,
        partition_key=args.partition_key,
        secondary_index=args.index,
    )
    if output.as_json:
        output.json(record_document(record))
    elif record.value is not None:
        output.raw(record.value)


async def _put(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    value = args.value_bytes
    indexes = dict(_pairs(args.index, "--index"))
    result = await client.put(
        args.key,
        value,
        expected_version=args.expected_version,
        partition_key=args.partition_key,
        ephemeral=args.ephemeral,
        sequence_key_deltas=args.sequence_key_delta,
        secondary_indexes=indexes or None,
    )
    if output.as_json:
        output.json({"key": result.key, "version": version_document(result.version)})
    else:
        output.line(f"{result.key} version {result.version.version_id}")
    if args.ephemeral:
        # The record lives as long as this client's session: hold it until told to stop.
        output.note("holding the ephemeral record until Ctrl-C")
        await asyncio.Event().wait()


async def _delete(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    await client.delete(
        args.key, expected_version=args.expected_version, partition_key=args.partition_key
    )
    if output.as_json:
        output.json({"deleted": args.key})
    else:
        output.line(f"deleted {args.key}")


async def _delete_range(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    await client.delete_range(args.start, args.end, partition_key=args.partition_key)
    if output.as_json:
        output.json({"deleted_range": [args.start, args.end]})
    else:
        output.line(f"deleted [{args.start}, {args.end})")


async def _list(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must not be negative")
    iterator = client.iter_list(
        args.start, args.end, partition_key=args.partition_key, secondary_index=args.index
    )
    count = 0
    try:
        async for key in iterator:
            if args.limit is not None and count >= args.limit:
                break
            if output.as_json:
                output.json({"key": key})
            else:
                output.line(key)
            count += 1
    finally:
        await _close_iterator(iterator)


async def _range(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    iterator = client.range_scan(
        args.start, args.end, partition_key=args.partition_key, secondary_index=args.index
    )
    try:
        async for record in iterator:
            if output.as_json:
                output.json(record_document(record))
            else:
                output.line(f"{record.key}\t{text_of(record.value)}")
    finally:
        await _close_iterator(iterator)


async def _watch(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    start_offsets = {}
    for shard, offset in _pairs(args.start_offsets, "--from"):
        try:
            start_offsets[int(shard)] = int(offset)
        except ValueError:
            raise UsageError(f"--from must look like SHARD=OFFSET, got {shard}={offset}") from None
    iterator = client.notifications(
        start_offsets, key_prefixes=args.prefixes, include_stat=args.include_stat
    )
    started: set[int] = set()
    try:
        async for batch in iterator:
            if not batch.notifications:
                # Where to resume from with --from: a shard's feed starts here, or
                # (filtered) went past entries with no matching change.
                if batch.shard in started:
                    output.note(f"shard {batch.shard}: passed offset {batch.offset}")
                else:
                    output.note(f"shard {batch.shard}: watching after offset {batch.offset}")
                    started.add(batch.shard)
            for item in batch.notifications:
                if output.as_json:
                    output.json(notification_document(batch, item))
                else:
                    output.line(notification_line(batch, item))
    finally:
        await _close_iterator(iterator)


async def _sequence_updates(client: AsyncClient, args: argparse.Namespace, output: Output) -> None:
    iterator = client.sequence_updates(args.key, partition_key=args.partition_key)
    try:
        async for key in iterator:
            if output.as_json:
                output.json({"highest_sequence_key": key})
            else:
                output.line(key)
    finally:
        await _close_iterator(iterator)


async def _close_iterator(iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


# Commands that run until interrupted: Ctrl-C (or SIGTERM) is their normal end.
_OPEN_ENDED = {"watch", "sequence-updates"}


def tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """The TLS files the options name; None: plaintext. Usage errors exit with 2."""
    single = (args.tls_ca, args.tls_cert, args.tls_key)
    if args.tls_dir is not None:
        if any(path is not None for path in single):
            raise SystemExit(
                "cairn: --tls-dir and --tls-ca/--tls-cert/--tls-key exclude each other"
            )
        return TlsFiles.in_directory(args.tls_dir)
    if all(path is None for path in single):
        return None
    try:
        return TlsFiles(args.tls_cert, args.tls_key, args.tls_ca)
    except TlsConfigError as error:
        raise SystemExit(f"cairn: {error}") from None


def bearer_token(args: argparse.Namespace) -> str | None:
    """The token of --token-file, else of $CAIRN_TOKEN; None: no credentials."""
    path = getattr(args, "token_file", None)
    if path:
        try:
            from_file = Path(path).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise SystemExit(f"cairn: --token-file: {error}") from None
        return from_file or None
    from_env: str | None = getattr(args, "env_token", None)
    return from_env or None


def client_options(args: argparse.Namespace) -> ClientOptions:
    return ClientOptions(
        request_timeout_s=args.timeout_s,
        connect_timeout_s=args.timeout_s,
        key_hash=KeyHash(args.key_hash),
        tls=tls_files(args),
        bearer_token=bearer_token(args),
    )


async def _run_data_command(handler: Handler, args: argparse.Namespace, output: Output) -> None:
    client = await AsyncClient.connect(
        args.address, namespace=args.namespace, options=client_options(args)
    )
    try:
        if args.command in _OPEN_ENDED or getattr(args, "ephemeral", False):
            await until_stopped(handler(client, args, output))
        else:
            await handler(client, args, output)
    finally:
        await client.close()


async def until_stopped(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` until it ends or SIGINT/SIGTERM arrives (then cancel it and return)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        stopper.cancel()
        if not task.done():
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not stop.is_set():
                raise


# ---- perf ------------------------------------------------------------------------------


# The load generator behind `cairn perf` ships in its own distribution, with the
# benchmarks, so the client library carries none of it (nor uvloop, which it runs on).
PERF_DISTRIBUTION = "cairn-kv-bench"
PERF_MISSING = (
    f"the load generator is not installed: it comes with {PERF_DISTRIBUTION} "
    f"(pip install {PERF_DISTRIBUTION})"
)


def _perf_arguments() -> Callable[[argparse.ArgumentParser], None] | None:
    """What adds `cairn perf`'s flags to its parser; None without cairn-kv-bench."""
    try:
        from cairn.bench.perf.command import add_arguments
    except ModuleNotFoundError as error:
        # Only the distribution's absence means "not installed"; a module missing
        # inside an installed one is a fault to show as it is.
        if error.name not in ("cairn.bench", "cairn.bench.perf", "cairn.bench.perf.command"):
            raise
        return None
    return add_arguments


def _perf(args: argparse.Namespace, output: Output) -> None:
    if getattr(args, "perf_missing", False):
        raise UsageError(PERF_MISSING)
    from cairn.bench.perf.command import options_from, run_command

    try:
        options = options_from(args)
    except ValueError as error:
        raise UsageError(str(error)) from None
    run_command(options, output.line, output.note, output.json)


# ---- entry point -----------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdin: Any = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    parser = build_parser(env)
    args, unrecognized = parser.parse_known_args(argv)
    # Without cairn-kv-bench, `cairn perf` knows none of its flags: whatever follows
    # it is left for the message saying what to install.
    if unrecognized and not getattr(args, "perf_missing", False):
        parser.error(f"unrecognized arguments: {' '.join(unrecognized)}")
    output = Output(stdout or sys.stdout, stderr or sys.stderr, args.json)
    try:
        if args.command == "put":
            args.value_bytes = read_value(args, sys.stdin if stdin is None else stdin)
        if args.command == "perf":
            _perf(args, output)
        elif args.command == "status":
            asyncio.run(status_command(args, output, client_options(args)))
        elif args.command == "admin":
            asyncio.run(admin_command(args, output, client_options(args)))
        else:
            asyncio.run(_run_data_command(args.handler, args, output))
    except AdminError as error:
        output.note(f"cairn admin {args.admin_command}: {error}")
        return error.exit_status
    except UsageError as error:
        output.note(f"cairn {args.command}: error: {error}")
        return EXIT_USAGE
    except errors.ClientError as error:
        output.note(f"cairn: {_describe(error)}")
        return exit_code_of(error)
    except KeyboardInterrupt:
        output.note("cairn: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # A reader that went away (`cairn list ... | head`): nothing left to say.
        _quiet_stdout()
        return EXIT_OK
    return EXIT_OK


def _describe(error: errors.ClientError) -> str:
    # The client's messages name the call and what happened ("get '/a': no such record").
    return str(error) or type(error).__name__


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
