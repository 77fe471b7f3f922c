"""``env_flag``, the one parser of boolean environment switches, and ``TQ_DEBUG`` on top of it."""

from __future__ import annotations

import pytest

from tq_core.contract import debug_enabled, env_flag

VAR = "TQ_TEST_SWITCH"
ON = ["1", "true", "yes", "on", "TRUE", "Yes", "  on ", "\tOn\n"]
OFF = ["0", "false", "no", "off", "", "  ", "FALSE", " No ", "OFF"]


@pytest.mark.parametrize("default", [False, True])
def test_unset_gives_the_default(monkeypatch, default):
    monkeypatch.delenv(VAR, raising=False)
    assert env_flag(VAR, default) is default


@pytest.mark.parametrize("word", ON)
@pytest.mark.parametrize("default", [False, True])
def test_on_words(monkeypatch, word, default):
    monkeypatch.setenv(VAR, word)
    assert env_flag(VAR, default) is True


@pytest.mark.parametrize("word", OFF)
@pytest.mark.parametrize("default", [False, True])
def test_off_words(monkeypatch, word, default):
    monkeypatch.setenv(VAR, word)
    assert env_flag(VAR, default) is False


@pytest.mark.parametrize("word", ["2", "y", "n", "enable", "onn", "truee", "-1", "o n"])
def test_unknown_word_raises_naming_the_variable(monkeypatch, word):
    monkeypatch.setenv(VAR, word)
    with pytest.raises(ValueError, match=f"{VAR}={word!r}"):
        env_flag(VAR)


def test_debug_enabled_follows_env_flag(monkeypatch):
    monkeypatch.delenv("TQ_DEBUG", raising=False)
    assert debug_enabled() is False
    for word in ON:
        monkeypatch.setenv("TQ_DEBUG", word)
        assert debug_enabled() is True, word
    for word in OFF:  # TQ_DEBUG=off is off
        monkeypatch.setenv("TQ_DEBUG", word)
        assert debug_enabled() is False, word
    monkeypatch.setenv("TQ_DEBUG", "maybe")
    with pytest.raises(ValueError, match="TQ_DEBUG"):
        debug_enabled()
