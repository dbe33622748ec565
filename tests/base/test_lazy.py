"""Lazy package names: resolved once from their module, unknown names and missing extras refused."""

from __future__ import annotations

import types

import pytest

from gpuwise.base import lazy
from gpuwise.errors import MissingExtraAttributeError, MissingExtraError


def test_a_name_resolves_from_its_module_and_is_kept() -> None:
    namespace: dict[str, object] = {}
    value = lazy.resolve("pkg", {"sqrt": "math"}, namespace, "sqrt")
    import math

    assert value is math.sqrt and namespace == {"sqrt": math.sqrt}


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nope'"):
        lazy.resolve("pkg", {}, {}, "nope")


def test_a_missing_extra_is_an_attribute_error_that_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(name: str) -> types.ModuleType:
        raise MissingExtraError("torch", "train")

    monkeypatch.setattr(lazy.importlib, "import_module", refuse)
    with pytest.raises(MissingExtraAttributeError) as err:
        lazy.resolve(
            "gpuwise.train", {"Checkpointer": "gpuwise.train.checkpointer"}, {}, "Checkpointer"
        )
    assert isinstance(err.value, AttributeError)
    assert "gpuwise.train.Checkpointer" in str(err.value)
    assert err.value.hint == "pip install 'gpuwise[train]'"
