"""Quantities behave like upstream's resource.Quantity: parsing, canonical text, exact
arithmetic and comparison."""

from __future__ import annotations

import pickle
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from draco.api.quantity import Quantity


@pytest.mark.parametrize(
    ("text", "nanos", "fmt"),
    [
        ("0", 0, "DecimalSI"),
        ("0Ki", 0, "BinarySI"),
        ("1", 10**9, "DecimalSI"),
        ("40Gi", 40 * 2**30 * 10**9, "BinarySI"),
        ("12Ki", 12 * 1024 * 10**9, "BinarySI"),
        ("3Ei", 3 * 2**60 * 10**9, "BinarySI"),
        ("500m", 500 * 10**6, "DecimalSI"),
        ("100n", 100, "DecimalSI"),
        ("4u", 4000, "DecimalSI"),
        ("1k", 10**12, "DecimalSI"),
        ("1M", 10**15, "DecimalSI"),
        ("2P", 2 * 10**24, "DecimalSI"),
        ("12E", 12 * 10**27, "DecimalSI"),
        ("1e3", 10**12, "DecimalExponent"),
        ("1E3", 10**12, "DecimalExponent"),
        ("1.3E+6", 13 * 10**14, "DecimalExponent"),
        ("1E-3", 10**6, "DecimalExponent"),
        ("1.5", 15 * 10**8, "DecimalSI"),
        ("+1", 10**9, "DecimalSI"),
        ("-2", -2 * 10**9, "DecimalSI"),
        (".001", 10**6, "DecimalSI"),
        ("1.", 10**9, "DecimalSI"),
        ("1.G", 10**18, "DecimalSI"),
        ("100.035k", 100035 * 10**9, "DecimalSI"),
        ("0.5Mi", 512 * 1024 * 10**9, "BinarySI"),
    ],
)
def test_parses_every_upstream_form(text: str, nanos: int, fmt: str) -> None:
    quantity = Quantity(text)
    assert quantity.nanos == nanos
    assert quantity.format == fmt
    assert quantity.original == text
    assert Quantity.parse(text) == quantity


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        # Anything finer than 1n rounds away from zero, as upstream.
        ("3.001n", 4),
        ("1.1E-9", 2),
        ("0.0000000001", 1),
        ("0.00000012345", 124),
        ("-0.0000000001", -1),
        (".000000000001Ki", 2),
    ],
)
def test_sub_nano_values_round_away_from_zero(text: str, nanos: int) -> None:
    assert Quantity(text).nanos == nanos


def test_binary_values_saturate_at_int64_max() -> None:
    assert Quantity("9Ei").value() == 2**63 - 1
    assert Quantity("12E").value() == 12 * 10**18  # decimal values do not saturate


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        ".",
        "1e1.5",
        "Gi",
    ],
)
def test_rejects_invalid_text_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not valid") as info:
        Quantity(text)
    assert repr(text) in str(info.value)


def test_rejects_huge_exponents() -> None:
    with pytest.raises(ValueError, match="out of range"):
        Quantity("1e100000")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1Ki", "1Ki"),
        ("1024Mi", "1Gi"),
        ("1024Gi", "1Ti"),
        ("307200Ki", "300Mi"),
        ("1025Ki", "1025Ki"),
        ("1000M", "1G"),
        ("0.001T", "1G"),
        ("1e3", "1e3"),
        ("1E3", "1e3"),
        ("1e5", "100e3"),
        (".001e12", "1e9"),
        ("1000e-12", "1e-9"),
        ("0.5", "500m"),
        ("1.08", "1080m"),
        ("1080000000n", "1080m"),
        ("1000u", "1m"),
        ("1500", "1500"),
        ("5000m", "5"),
        ("+4.56", "4560m"),
        ("0", "0"),
        ("0Mi", "0"),
        ("00", "0"),
        ("1000E", "1e21"),
        ("5000E", "5e21"),
        # BinarySI below 1024 or with a fraction is written in DecimalSI.
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("0.5Ki", "512"),
        ("100.035Ki", "102435840m"),
        ("-1Gi", "-1Gi"),
        ("-0.5", "-500m"),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    assert str(Quantity(text)) == canonical
    assert str(Quantity(canonical)) == canonical


def test_from_int_is_decimal() -> None:
    assert str(Quantity(1000)) == "1k"
    assert str(Quantity(1024)) == "1024"
    assert Quantity(5).original is None
    assert Quantity(5).to_json() == "5"


def test_to_json_keeps_the_original_text() -> None:
    assert Quantity("1024Mi").to_json() == "1024Mi"
    assert str(Quantity("1024Mi")) == "1Gi"
    assert repr(Quantity("0.5")) == "Quantity('0.5')"


def test_equality_and_hash_go_by_value() -> None:
    assert Quantity("1Gi") == Quantity("1024Mi")
    assert len({Quantity("1Gi"), Quantity("1024Mi"), Quantity("1073741824")}) == 1
    assert Quantity("5") == 5
    assert hash(Quantity("5")) == hash(5)
    assert Quantity("5") != Quantity("5001m")
    assert Quantity("1") != "1"


def test_comparisons() -> None:
    assert Quantity("100m") > Quantity("50m")
    assert Quantity("10000T") > Quantity("100Gi")
    assert Quantity("1Gi") <= Quantity("1024Mi")
    assert Quantity("999m") < 1
    assert Quantity("1Gi").compare(Quantity("1G")) == 1
    assert Quantity("1G").compare("1Gi") == -1
    assert Quantity("1k").compare(1000) == 0
    assert sorted([Quantity("2"), Quantity("1500m"), Quantity("1Ki")]) == [
        Quantity("1500m"),
        Quantity("2"),
        Quantity("1Ki"),
    ]


def test_arithmetic_is_exact() -> None:
    assert Quantity("1") + Quantity("500m") == Quantity("1.5")
    assert str(Quantity("0.1") + Quantity("0.2")) == "300m"
    assert Quantity("1Gi") - Quantity("512Mi") == Quantity("512Mi")
    assert str(Quantity("1Gi") - Quantity("512Mi")) == "512Mi"
    assert str(Quantity("100m") * 3) == "300m"
    assert str(3 * Quantity("1Gi")) == "3Gi"
    assert str(-Quantity("1Gi")) == "-1Gi"
    assert abs(Quantity("-2")) == Quantity("2")
    assert (Quantity("1") + Quantity("1")).original is None


def test_arithmetic_keeps_the_left_format_unless_it_is_zero() -> None:
    assert str(Quantity("0") + Quantity("1Gi")) == "1Gi"
    assert str(Quantity("1Gi") + Quantity("0")) == "1Gi"
    assert str(Quantity("0") - Quantity("100m")) == "-100m"
    assert str(Quantity("1Gi") + Quantity("1G")) == "2073741824"


def test_division() -> None:
    assert Quantity("3") / 2 == Quantity("1500m")
    assert Quantity("1n") / 2 == Quantity("1n")  # rounds away from zero
    assert Quantity("-1n") / 2 == Quantity("-1n")
    assert Quantity("3n") // 2 == Quantity("1n")
    assert Quantity("1Gi") // Quantity("1Mi") == 1024
    assert Quantity("5") % Quantity("2") == Quantity("1")
    with pytest.raises(ZeroDivisionError):
        Quantity("1") / 0


def test_integer_views_round_away_from_zero_like_value() -> None:
    assert Quantity("1.5").value() == 2
    assert Quantity("-1.5").value() == -2
    assert Quantity("1.5").as_integer() == 2
    assert Quantity("100n").milli_value() == 1
    assert Quantity("1.5").milli_value() == 1500
    assert Quantity("40Gi").value() == 40 * 2**30
    assert Quantity("1").scaled_value(-9) == 10**9
    assert Quantity("1.5").as_int64() is None
    assert Quantity("8").as_int64() == 8
    assert Quantity("12E").as_int64() is None


def test_predicates_and_floats() -> None:
    assert Quantity("1k").is_integer()
    assert not Quantity("500m").is_integer()
    assert Quantity("-3").sign() == -1
    assert Quantity("0").sign() == 0
    assert Quantity("2m").sign() == 1
    assert Quantity("0").is_zero()
    assert not Quantity("0")
    assert Quantity("1.5").as_approximate_float() == 1.5
    assert Quantity("1.5").as_fraction() == Fraction(3, 2)


def test_immutable_and_picklable() -> None:
    quantity = Quantity("40Gi")
    with pytest.raises(AttributeError):
        quantity._nanos = 1  # type: ignore[misc]
    copy = pickle.loads(pickle.dumps(quantity))
    assert copy == quantity
    assert copy.original == "40Gi"


def test_constructors() -> None:
    assert Quantity.from_milli(1500) == Quantity("1.5")
    assert Quantity.from_nanos(5) == Quantity("5n")
    assert Quantity.from_fraction(Fraction(1, 3)) == Quantity("333333334n")
    assert Quantity(Quantity("1Gi")).original == "1Gi"
    with pytest.raises(TypeError):
        Quantity(True)
    with pytest.raises(TypeError):
        Quantity(1.5)  # type: ignore[arg-type]


def test_from_json_takes_what_json_and_yaml_hold() -> None:
    assert Quantity.from_json("40Gi").original == "40Gi"
    assert Quantity.from_json(8) == Quantity(8)
    assert Quantity.from_json(1.5) == Quantity("1500m")
    same = Quantity("1Gi")
    assert Quantity.from_json(same) is same
    for wrong in (True, None, float("inf"), ["1"]):
        with pytest.raises(ValueError, match="must be a string or an integer"):
            Quantity.from_json(wrong)


def test_draco_api_quantity_is_the_top_level_quantity() -> None:
    import draco.quantity

    assert Quantity is draco.quantity.Quantity


class _Holder(BaseModel):
    value: Quantity


def test_pydantic_accepts_text_ints_and_yaml_floats_and_dumps_text() -> None:
    assert _Holder.model_validate({"value": "40Gi"}).model_dump() == {"value": "40Gi"}
    assert _Holder.model_validate({"value": 8}).model_dump(mode="json") == {"value": "8"}
    assert _Holder.model_validate({"value": 1.5}).value == Quantity("1.5")
    assert _Holder(value=Quantity("1e3")).model_dump_json() == '{"value":"1e3"}'
    with pytest.raises(ValidationError, match="is not valid"):
        _Holder.model_validate({"value": "forty"})
    with pytest.raises(ValidationError):
        _Holder.model_validate({"value": True})


def test_pydantic_json_schema_is_int_or_string() -> None:
    schema = _Holder.model_json_schema()["properties"]["value"]
    assert schema["x-kubernetes-int-or-string"] is True


# Within int64 units: parsing saturates larger BinarySI values, as upstream does.
@given(
    st.integers(min_value=-(9 * 10**27), max_value=9 * 10**27),
    st.sampled_from(["BinarySI", "DecimalSI", "DecimalExponent"]),
)
def test_canonical_text_parses_back_to_the_same_value(nanos: int, fmt: str) -> None:
    quantity = Quantity.from_nanos(nanos, fmt=fmt)  # type: ignore[arg-type]
    assert Quantity(str(quantity)) == quantity


@given(st.integers(min_value=-(10**20), max_value=10**20), st.integers(min_value=-(10**20), max_value=10**20))
def test_addition_matches_integer_arithmetic(a: int, b: int) -> None:
    assert (Quantity.from_nanos(a) + Quantity.from_nanos(b)).nanos == a + b
    assert (Quantity.from_nanos(a) - Quantity.from_nanos(b)).nanos == a - b
    assert Quantity.from_nanos(a).compare(Quantity.from_nanos(b)) == (a > b) - (a < b)
