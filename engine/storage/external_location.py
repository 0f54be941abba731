"""Where an external tensor's Parquet dataset lives: a local or shared path, or an s3:// URI, checked
against the allowed roots, and the pyarrow filesystem that reads it.

The roots come from the connection's settings (`external_roots`), never from the database file: a
catalog written elsewhere names only a location, and every read checks it again, so a tampered
catalog cannot make trdb read outside the roots. Local paths are compared after resolving `..` and
symbolic links. S3 credentials come from where the AWS SDK inside pyarrow looks (environment
variables, ~/.aws files); the endpoint of an S3-compatible server comes from the `s3_endpoint`
setting, never from the location, so a catalog cannot send trdb's signed requests elsewhere.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from trdb.errors import NotSupportedError, OperationalError
from trdb.storage.file_sandbox import FileSandbox, resolve

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ROOTS_HINT = "SET external_roots = '<directory or s3://bucket/prefix>, ...' (a setting of the connection)"
CONNECT_SECONDS = 5      # an S3 server that does not answer fails the statement soon, not after minutes
REQUEST_SECONDS = 60
ATTEMPTS = 3


@dataclass(frozen=True)
class Location:
    """A checked location: `path` is absolute in its filesystem (a local path, or 'bucket/key/...')."""

    uri: str
    scheme: str     # 'file' or 's3'
    path: str
    endpoint: str = ""
    roots: tuple[str, ...] = ()     # the local roots, resolved
    sandbox: FileSandbox = FileSandbox()  # DuckDB's file access settings of the connection that checked it

    def opened(self, path: str) -> str:
        """The path to open for a file of the dataset: a local one resolved (links followed, a part file that
        leads out of the roots refused), and allowed by DuckDB's file access settings."""
        if self.scheme != "file":
            refusal = self.sandbox.refusal(f"s3://{path}")
            if refusal:
                raise OperationalError(refusal, hint="SET allowed_directories before disabling enable_external_access")
            return path
        full = resolve(path)
        if not any(_under(full, root) for root in self.roots):
            raise OperationalError(f"the file '{path}' of '{self.uri}' leads to '{full}', outside the allowed roots "
                                   f"of external tensors (allowed: {', '.join(self.roots) or 'none'})", hint=_ROOTS_HINT)
        return self.sandbox.resolved(full)

    def filesystem(self) -> pafs.FileSystem:
        return pafs.LocalFileSystem() if self.scheme == "file" else s3_filesystem(self.endpoint)

    def describe(self, path: str) -> str:
        """A file of the dataset as the user would write it."""
        return path if self.scheme == "file" else f"s3://{path}"


def normalized(uri: str) -> str:
    """The location as the catalog keeps it: local paths absolute (the working directory may change)."""
    scheme, path = _split(uri)
    return f"s3://{path}" if scheme == "s3" else os.path.abspath(path)


def locate(uri: str, roots: Sequence[str], endpoint: str = "") -> Location:
    """The checked location of `uri`; an OperationalError when it lies outside every root."""
    scheme, path = _split(uri)
    local = tuple(resolve(_split(r)[1]) for r in roots if _split(r)[0] == "file")
    if scheme == "file":
        path = resolve(path)  # read where it was checked: links resolved once
        inside = any(_under(path, r) for r in local)
    else:
        inside = any(_under_key(path, _split(r)[1]) for r in roots if _split(r)[0] == "s3")
    if not inside:
        allowed = ", ".join(roots) if roots else "none"
        raise OperationalError(f"the location '{uri}' is outside the allowed roots of external tensors "
                               f"(allowed: {allowed})", hint=_ROOTS_HINT)
    return Location(normalized(uri), scheme, path, endpoint if scheme == "s3" else "", local if scheme == "file" else ())


def parse_roots(text: str) -> list[str]:
    """The roots of a comma-separated `external_roots` value, each checked to be a path or an s3:// URI."""
    roots = [part.strip() for part in str(text).split(",") if part.strip()]
    for root in roots:
        _split(root)
    return roots


def _split(uri: str) -> tuple[str, str]:
    """('file', path) or ('s3', 'bucket/key...'); anything else is refused with a reason."""
    if not isinstance(uri, str) or not uri.strip() or "\x00" in uri:
        raise OperationalError("an external tensor needs a location: a directory, a Parquet file or an s3:// URI",
                               hint="LOCATION '/shared/data/x' or LOCATION 's3://bucket/prefix/x'")
    if uri.startswith("file://"):
        return "file", urlsplit(uri).path
    if "://" not in uri:
        return "file", uri
    scheme, rest = uri.split("://", 1)
    if scheme.lower() != "s3":
        raise NotSupportedError(f"the location '{uri}' is neither a path nor an s3:// URI",
                                hint="external tensors live in a local or shared directory, or on S3")
    if any(c in rest for c in "?#\\"):
        raise NotSupportedError(f"the location '{uri}' has a query or fragment",
                                hint="the endpoint of an S3-compatible server is the s3_endpoint setting")
    bucket, _, key = rest.partition("/")
    parts = key.rstrip("/").split("/") if key.rstrip("/") else []
    if not _BUCKET.fullmatch(bucket) or any(p in ("", ".", "..") for p in parts):
        raise OperationalError(f"the location '{uri}' is not a valid s3://bucket/key URI")
    return "s3", "/".join([bucket] + parts)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(os.path.join(root, ""))


def _under_key(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


@functools.lru_cache(maxsize=8)
def s3_filesystem(endpoint: str) -> pafs.S3FileSystem:
    """pyarrow's S3 client (credentials and region from the environment and ~/.aws), one per endpoint."""
    options = dict(connect_timeout=CONNECT_SECONDS, request_timeout=REQUEST_SECONDS,
                   retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS))
    if endpoint:
        parsed = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
    return pafs.S3FileSystem(**options)
