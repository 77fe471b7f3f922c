"""The one parser of tq's boolean environment switches (``TQ_DEBUG``, ``TQ_VLLM_*``)."""

from __future__ import annotations

import os

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """Whether the switch ``name`` is on.

    Unset gives ``default``. Case and surrounding spaces are ignored: ``1/true/yes/on``
    are on, ``0/false/no/off`` and the empty string are off; any other value raises
    ``ValueError`` naming the variable, so a typo never silently flips a switch.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of {TRUE_WORDS} (on) or {FALSE_WORDS[1:]} (off)")
