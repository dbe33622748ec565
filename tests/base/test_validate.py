"""The shared data-file number checks: what passes, and what each refusal says."""

from __future__ import annotations

import pytest

from gpuwise.base.validate import finite_number, ratio, whole_number
from gpuwise.errors import DataFileError


@pytest.mark.parametrize(
    ("value", "kwargs", "want"),
    [
        (3, {}, 3.0),  # an int becomes a plain float
        (0.0, {}, 0.0),  # the minimum itself is allowed
        ("2.5", {"text_ok": True}, 2.5),  # a CSV cell
        (1e-9, {"positive": True}, 1e-9),
        (7.0, {"minimum": None}, 7.0),
        (-4.0, {"minimum": None}, -4.0),  # no lower bound
        (-2, {"minimum": None, "maximum": 1.0}, -2.0),  # only an upper bound
    ],
)
def test_finite_number_accepts(value: object, kwargs: dict[str, object], want: float) -> None:
    got = finite_number(value, "f.yaml: x", **kwargs)  # type: ignore[arg-type]
    assert got == want and type(got) is float


@pytest.mark.parametrize(
    ("value", "kwargs", "says"),
    [
        (True, {}, "expected a finite number ≥ 0, got True"),  # YAML's yes is not 1
        ("2.5", {}, "got '2.5'"),  # text only where asked for
        (float("nan"), {}, "got nan"),
        (float("inf"), {}, "got inf"),
        pytest.param(10**5000, {}, "too large", id="5000-digit-int"),  # from a JSON file
        (-1, {}, "expected a finite number ≥ 0, got -1"),
        (0, {"positive": True}, "expected a finite number > 0, got 0"),
        (2, {"maximum": 1.0}, "from 0 to 1, got 2"),
        ("x" * 100, {"text_ok": True}, "..."),  # long junk is shortened in the message
    ],
)
def test_finite_number_refuses_and_names_the_place(
    value: object, kwargs: dict[str, object], says: str
) -> None:
    with pytest.raises(DataFileError) as err:
        finite_number(value, "prices.csv, row 3, price", **kwargs)  # type: ignore[arg-type]
    assert str(err.value).startswith("prices.csv, row 3, price: ")
    assert says in str(err.value)
    assert err.value.hint


@pytest.mark.parametrize(
    ("value", "ok"), [(0, True), (5, True), (-1, False), (1.5, False), (True, False)]
)
def test_whole_number(value: object, ok: bool) -> None:
    if ok:
        assert whole_number(value, "w") == value
    else:
        with pytest.raises(DataFileError, match="whole number"):
            whole_number(value, "w")


def test_ratio_bounds() -> None:
    assert ratio(100, "u", top=100) == 100.0
    with pytest.raises(DataFileError):
        ratio(1.01, "u")
