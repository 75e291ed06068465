"""Semantic versions (SemVer 2.0.0) as exact values, for `version` device attributes.

A device's `version` attribute reaches CEL as a version object rather than a string, so
`device.attributes["d"].driverVersion.isGreaterThan(semver("1.2.0"))` orders `1.10.0`
after `1.9.0` and a pre-release before its release. The Kubernetes semver library parses
strictly (no leading `v`, no leading zeros, all three numbers); `normalize=True` is the
library's lenient form (`v1.2` becomes `1.2.0`, leading zeros are dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from draco.errors import SemVerError

__all__ = ["SemVer", "SemVerError"]

_NUMBER = r"0|[1-9][0-9]*"
_PRE_IDENTIFIER = rf"(?:{_NUMBER}|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_STRICT = re.compile(
    rf"^(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<pre>{_PRE_IDENTIFIER}(?:\.{_PRE_IDENTIFIER})*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
_LENIENT_CORE = re.compile(r"^v?(?P<core>[0-9]+(?:\.[0-9]+){0,2})(?P<rest>[-+].*)?$")
_MAX_UINT64 = 2**64 - 1


@total_ordering
@dataclass(frozen=True, eq=False, slots=True)
class SemVer:
    """One version; equality and order ignore build metadata, as SemVer 2.0.0 says."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> SemVer:
        """Parse `text`; with `normalize`, accept a leading `v`, missing parts and leading zeros."""
        if normalize:
            text = _normalized(text)
        match = _STRICT.match(text)
        if match is None:
            raise SemVerError(f"invalid semver {text!r}: expected MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]")
        numbers = [int(match[part]) for part in ("major", "minor", "patch")]
        if any(n > _MAX_UINT64 for n in numbers):
            raise SemVerError(f"invalid semver {text!r}: a version number is out of range")
        pre = tuple(int(p) if p.isdigit() else p for p in match["pre"].split(".")) if match["pre"] else ()
        build = tuple(match["build"].split(".")) if match["build"] else ()
        return cls(numbers[0], numbers[1], numbers[2], pre, build)

    @classmethod
    def is_valid(cls, text: str, *, normalize: bool = False) -> bool:
        try:
            cls.parse(text, normalize=normalize)
        except SemVerError:
            return False
        return True

    def compare(self, other: SemVer) -> int:
        """-1, 0 or 1, with SemVer 2.0.0 precedence (a pre-release sorts before its release)."""
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        if self.prerelease == other.prerelease:
            return 0
        if not self.prerelease:
            return 1
        if not other.prerelease:
            return -1
        for a, b in zip(self.prerelease, other.prerelease, strict=False):
            if a == b:
                continue
            # Numeric identifiers sort before alphanumeric ones.
            if isinstance(a, int) and isinstance(b, int):
                return -1 if a < b else 1
            if isinstance(a, int):
                return -1
            if isinstance(b, int):
                return 1
            return -1 if a < b else 1
        return -1 if len(self.prerelease) < len(other.prerelease) else 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SemVer):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other: SemVer) -> bool:
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.prerelease))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _normalized(text: str) -> str:
    match = _LENIENT_CORE.match(text)
    if match is None:
        return text
    parts = [str(int(p)) for p in match["core"].split(".")]
    parts += ["0"] * (3 - len(parts))
    return ".".join(parts) + (match["rest"] or "")
