"""The storage error family (as upstream's `storage.StorageError`).

One coded exception; the HTTP layer maps codes to Status objects in one place
(`apiserver/status.py`).
"""
from __future__ import annotations

import enum


class Code(enum.Enum):
    KEY_NOT_FOUND = "KeyNotFound"
    KEY_EXISTS = "KeyExists"
    RV_CONFLICT = "ResourceVersionConflicts"
    UNREACHABLE = "Unreachable"
    EXPIRED = "Expired"              # revision compacted (S1.24, S2.12)
    TOO_LARGE_RV = "TooLargeResourceVersion"  # revision beyond etcd's (S1.22)
    NOT_READY = "NotReady"           # the watch cache is (re)initializing (S1.25, S1.33)
    PROGRESS_UNSUPPORTED = "RequestWatchProgressDisabled"  # a consistent watch-list needs it (S3.7)
    INVALID_RV = "InvalidResourceVersion"  # an unparseable resourceVersion (S1.11)
    INVALID_CONTINUE = "InvalidContinue"  # undecodable token (S1.13, S2.3), or with a resourceVersion (S1.12)
    INVALID_KEY = "InvalidKey"        # a key with "." or ".." segments (upstream's etcd3 prepareKey, S11.6)
    INVALID_OBJECT = "InvalidObject"  # a value this store cannot encode (nested deeper than orjson's 254 levels)
    TOO_LARGE = "RequestTooLarge"     # etcd refused the request: over its --max-request-bytes
    INTERNAL = "Internal"


class StorageError(Exception):
    def __init__(self, code: Code, key: str = "", message: str = "", *,
                 rv: int = 0, current_rv: int = 0, retry_after: int = 0, status_message: str = "",
                 continue_token: str | None = None):
        super().__init__(message or f"{code.value}: {key}")
        self.code = code
        self.key = key
        self.rv = rv
        self.current_rv = current_rv
        self.message = message
        self.retry_after = retry_after          # seconds a client should wait (TOO_LARGE_RV, NOT_READY)
        self.status_message = status_message    # the Status message where upstream words it here (EXPIRED)
        self.continue_token = continue_token    # S2.12: the token that continues inconsistently


def not_found(key: str) -> StorageError:
    return StorageError(Code.KEY_NOT_FOUND, key)


def exists(key: str) -> StorageError:
    return StorageError(Code.KEY_EXISTS, key)


def conflict(key: str, message: str) -> StorageError:
    return StorageError(Code.RV_CONFLICT, key, message)


def invalid_continue(message: str) -> StorageError:
    """A continue token that does not decode (S1.13, S2.3) or comes with a resourceVersion (S1.12):
    `message` is upstream's full text; answered 400 BadRequest."""
    return StorageError(Code.INVALID_CONTINUE, message=message)


def invalid_key(key: str) -> StorageError:
    """upstream's etcd3 store.prepareKey: `invalid key: "<key>"`."""
    return StorageError(Code.INVALID_KEY, key, f'invalid key: "{key}"')
