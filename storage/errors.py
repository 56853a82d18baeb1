"""The storage error family (as upstream's `storage.StorageError`).

One coded exception; the HTTP layer maps codes to Status objects in one place
(`apiserver/storage_errors.py`).
"""
from __future__ import annotations

import enum


class Code(enum.Enum):
    KEY_NOT_FOUND = "KeyNotFound"
    KEY_EXISTS = "KeyExists"
    RV_CONFLICT = "ResourceVersionConflicts"
    INVALID_OBJ = "InvalidObj"
    UNREACHABLE = "Unreachable"
    EXPIRED = "Expired"              # revision compacted (S1.24, S2.12)
    TOO_LARGE_RV = "TooLargeResourceVersion"  # revision beyond etcd's (S1.22)
    INTERNAL = "Internal"


class StorageError(Exception):
    def __init__(self, code: Code, key: str = "", message: str = "", *,
                 rv: int = 0, current_rv: int = 0):
        super().__init__(message or f"{code.value}: {key}")
        self.code = code
        self.key = key
        self.rv = rv
        self.current_rv = current_rv
        self.message = message


def not_found(key: str) -> StorageError:
    return StorageError(Code.KEY_NOT_FOUND, key)


def exists(key: str) -> StorageError:
    return StorageError(Code.KEY_EXISTS, key)


def conflict(key: str, message: str) -> StorageError:
    return StorageError(Code.RV_CONFLICT, key, message)
