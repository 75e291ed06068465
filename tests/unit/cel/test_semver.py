"""SemVer 2.0.0 values: parsing (strict and normalized) and precedence."""

from __future__ import annotations

import itertools

import pytest

from draco.cel import SemVer, SemVerError


def test_parse_reads_every_part() -> None:
    version = SemVer.parse("1.22.333-rc.1+build.5")
    assert (version.major, version.minor, version.patch) == (1, 22, 333)
    assert version.prerelease == ("rc", 1)
    assert version.build == ("build", "5")
    assert str(version) == "1.22.333-rc.1+build.5"


@pytest.mark.parametrize(
    "text", ["1.2", "v1.2.3", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3+", "1.2.3-a..b", "", "1.2.3.4", "a.b.c"]
)
def test_strict_parse_rejects(text: str) -> None:
    with pytest.raises(SemVerError, match="invalid semver"):
        SemVer.parse(text)
    assert not SemVer.is_valid(text)


def test_precedence_follows_the_specification() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.9.0",
        "1.10.0",
        "2.0.0",
    ]
    versions = [SemVer.parse(text) for text in ordered]
    assert sorted(reversed(versions)) == versions
    for lower, higher in itertools.pairwise(versions):
        assert lower.compare(higher) == -1
        assert higher.compare(lower) == 1


def test_build_metadata_does_not_count() -> None:
    assert SemVer.parse("1.2.3+a") == SemVer.parse("1.2.3+b")
    assert SemVer.parse("1.2.3+a").compare(SemVer.parse("1.2.3")) == 0
    assert hash(SemVer.parse("1.2.3+a")) == hash(SemVer.parse("1.2.3"))


def test_normalize_accepts_the_lenient_forms() -> None:
    assert str(SemVer.parse("v1.2", normalize=True)) == "1.2.0"
    assert str(SemVer.parse("01.02.03", normalize=True)) == "1.2.3"
    assert str(SemVer.parse("v2", normalize=True)) == "2.0.0"
    assert str(SemVer.parse("1.2-rc.1", normalize=True)) == "1.2.0-rc.1"
