"""The data sources' options, parsed once into frozen settings (every limit with
its unit), and the client settings they imply.

Spark hands options over as a case-insensitive map of strings; they are read here
by their documented camelCase names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cairn.client.options import ClientOptions
from cairn.common.tls import TlsConfigError, TlsFiles

WRITE_MODES = ("upsert", "create-only")

# TLS: `tlsDir` (a directory in cert-manager's layout: ca.crt, and tls.crt/tls.key
# for a client certificate), or the files one by one (`tlsCaFile`, `tlsCertFile`,
# `tlsKeyFile`), or `tls=true` alone (the system's roots). The paths are read on
# the driver AND on every executor, so they must exist on each of them.
TLS_FILE_OPTIONS = ("tlsCaFile", "tlsCertFile", "tlsKeyFile")
# Bearer tokens: `tokenFile`, a file holding the token, read where each client is
# made (the driver and every executor), like the TLS files. A token given inline is
# refused: options show in Spark's plans and UI.
INLINE_TOKEN_OPTION = "token"


class OptionError(ValueError):
    """An option that is missing or malformed; the message names it."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark's option map is case-insensitive when it is a CaseInsensitiveDict, but a
    # plain dict (tests, jobs) is not: look the name up both ways.
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return value


def _int(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be at least {minimum}, not {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, not {raw!r}")


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Where the data is: picklable (no client, no channel), so that it can travel
    to executors inside the data source objects; each task connects itself."""

    address: str
    namespace: str
    request_timeout_s: float
    # TLS files as strings (paths on every machine of the job); None: plaintext.
    tls: TlsPaths | None = None
    # A file holding the bearer token (a path on every machine); None: no token.
    token_file: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, str]) -> ConnectionSettings:
        address = _get(options, "address")
        if not address:
            raise OptionError("option 'address' (any storage pod's client address) is required")
        if _get(options, INLINE_TOKEN_OPTION) is not None:
            raise OptionError(
                f"option {INLINE_TOKEN_OPTION!r} is refused: options show in Spark's plans "
                "and UI; put the token in a file and give its path as 'tokenFile'"
            )
        timeout_s = _int(options, "requestTimeoutMs", 30_000, 1) / 1000
        return cls(
            address,
            _get(options, "namespace") or "default",
            timeout_s,
            TlsPaths.of(options),
            _get(options, "tokenFile") or None,
        )

    def client_options(self) -> ClientOptions:
        tls = self.tls.files() if self.tls is not None else None
        return ClientOptions(
            request_timeout_s=self.request_timeout_s, tls=tls, bearer_token=self._token()
        )

    def _token(self) -> str | None:
        if self.token_file is None:
            return None
        try:
            token = Path(self.token_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise OptionError(f"option 'tokenFile': {error}") from None
        if not token:
            raise OptionError(f"option 'tokenFile': {self.token_file} holds no token")
        return token


@dataclass(frozen=True, slots=True)
class TlsPaths:
    """The TLS options: the CA to check the servers by (None: the system's roots)
    and optionally a client certificate with its key."""

    ca: str | None
    certificate: str | None
    key: str | None

    @classmethod
    def of(cls, options: Mapping[str, str]) -> TlsPaths | None:
        directory = _get(options, "tlsDir")
        files = {name: _get(options, name) for name in TLS_FILE_OPTIONS}
        enabled = _bool(options, "tls", directory is not None or any(files.values()))
        if directory is not None and any(files.values()):
            raise OptionError("option 'tlsDir' excludes 'tlsCaFile', 'tlsCertFile', 'tlsKeyFile'")
        if not enabled:
            if directory is not None or any(files.values()):
                raise OptionError("TLS files are given but option 'tls' is false")
            return None
        if directory is not None:
            found = TlsFiles.in_directory(Path(directory))
            return cls(
                str(found.ca) if found.ca is not None else None,
                str(found.certificate) if found.certificate is not None else None,
                str(found.key) if found.key is not None else None,
            )
        paths = cls(files["tlsCaFile"], files["tlsCertFile"], files["tlsKeyFile"])
        paths.files()  # a certificate without its key (or the reverse) fails here
        return paths

    def files(self) -> TlsFiles:
        def path(value: str | None) -> Path | None:
            return Path(value) if value is not None else None

        try:
            return TlsFiles(path(self.certificate), path(self.key), path(self.ca))
        except TlsConfigError as error:
            raise OptionError(f"options 'tlsCertFile'/'tlsKeyFile': {error}") from None


@dataclass(frozen=True, slots=True)
class ReadSettings:
    # Rows per Arrow record batch handed to Spark.
    batch_rows: int
    # Filters on `key` and `shard` become range scans and pruned shards. Off: for
    # sessions without spark.sql.python.filterPushdown.enabled, where Spark refuses
    # readers that take filters.
    pushdown: bool

    @classmethod
    def of(cls, options: Mapping[str, str]) -> ReadSettings:
        return cls(
            batch_rows=_int(options, "batchRows", 10_000, 1),
            pushdown=_bool(options, "pushdown", True),
        )


@dataclass(frozen=True, slots=True)
class WriteSettings:
    mode: str
    # Puts in flight at once per task (the client batches them per shard).
    max_inflight_puts: int
    # `overwrite` deletes the records with this prefix first; required with it.
    prefix: str | None
    # Where the driver writes the job's summary (JSON), if anywhere.
    summary_path: str | None

    @classmethod
    def of(cls, options: Mapping[str, str]) -> WriteSettings:
        mode = (_get(options, "writeMode") or "upsert").lower()
        if mode not in WRITE_MODES:
            raise OptionError(f"option 'writeMode' must be one of {WRITE_MODES}, not {mode!r}")
        return cls(
            mode=mode,
            max_inflight_puts=_int(options, "maxInflightPuts", 1000, 1),
            prefix=_get(options, "prefix") or None,
            summary_path=_get(options, "summaryPath") or None,
        )


@dataclass(frozen=True, slots=True)
class StreamSettings:
    # "earliest", "latest", or a JSON object {"<shard>": <offset>, ...}.
    starting: str
    starting_offsets: Mapping[str, int] | None
    # Changes (rows) per micro-batch at most; None: all available.
    max_changes_per_trigger: int | None
    fail_on_data_loss: bool
    # When planning a micro-batch, a shard's feed counts as caught up once no batch
    # came for this long (entries that changed nothing have no batch to wait for).
    caught_up_after_s: float
    # Only the changes of keys with one of these prefixes (and range deletions that
    # can cover such a key), filtered by the storage pods; empty: every change.
    # Spark pushes no filters into a streaming source, so `key.startswith(...)` on
    # the stream is applied by Spark after the pods sent everything: these options
    # are how the filter reaches the pods.
    key_prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, options: Mapping[str, str]) -> StreamSettings:
        starting = (_get(options, "startingOffsets") or "latest").strip()
        offsets: dict[str, int] | None = None
        if starting.lower() in ("earliest", "latest"):
            starting = starting.lower()
        else:
            try:
                parsed = json.loads(starting)
                offsets = {str(int(k)): int(v) for k, v in parsed.items()}
            except (ValueError, AttributeError, TypeError):
                raise OptionError(
                    "option 'startingOffsets' must be earliest, latest or a JSON object "
                    f'{{"<shard>": <offset>}}, not {starting!r}'
                ) from None
            starting = "json"
        limit = _int(options, "maxChangesPerTrigger", 0, 0)
        return cls(
            starting=starting,
            starting_offsets=offsets,
            max_changes_per_trigger=limit or None,
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            caught_up_after_s=_int(options, "caughtUpAfterMs", 500, 1) / 1000,
            key_prefixes=_key_prefixes(options),
        )


def _key_prefixes(options: Mapping[str, str]) -> tuple[str, ...]:
    """`keyPrefix` (one prefix, as is) and `keyPrefixes` (a JSON array of them)."""
    found: list[str] = []
    one = _get(options, "keyPrefix")
    if one is not None:
        found.append(one)
    many = _get(options, "keyPrefixes")
    if many is not None:
        try:
            parsed = json.loads(many)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list) or not all(isinstance(p, str) for p in parsed):
            raise OptionError(
                f"option 'keyPrefixes' must be a JSON array of strings [\"/a/\", ...], not {many!r}"
            )
        found += parsed
    # An empty prefix matches every key: no filter at all.
    if "" in found:
        return ()
    return tuple(sorted(set(found)))
