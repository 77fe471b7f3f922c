"""The text ``tq eval`` scores, split into fixed windows of tokens."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RangeError

DEFAULT_TEXT = "pydoc_data.topics"


def default_text() -> str:
    """English prose that ships with Python: the help topics of ``pydoc_data.topics``,
    in the order of their names, separated by blank lines."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def load_text(path: str | Path | None) -> tuple[str, str]:
    """``(text, label)`` of a UTF-8 file, or of :func:`default_text` when ``path`` is None."""
    if path is None:
        return default_text(), DEFAULT_TEXT
    return read_utf8(path, "text"), str(path)


def read_utf8(path: str | Path, what: str) -> str:
    """The contents of a UTF-8 file; :class:`RangeError` naming ``what`` when it cannot be read."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RangeError(f"{what} {str(p)!r} does not exist") from None
    except UnicodeDecodeError as exc:
        raise RangeError(f"{what} {str(p)!r} is not UTF-8: {exc}") from None


@dataclass(frozen=True)
class Windows:
    """``count`` windows of ``length`` token ids, spread evenly over the tokenised text.

    ``scored_bytes[i]``: UTF-8 bytes of the text of window ``i``'s predicted tokens (all but
    its first), the denominator of bits per byte.
    """

    ids: list[list[int]]
    starts: list[int]
    scored_bytes: list[int]
    text_tokens: int

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def length(self) -> int:
        return len(self.ids[0])


def make_windows(text: str, tokenizer: Any, count: int, length: int) -> Windows:
    """Tokenise ``text`` once and cut ``count`` windows of ``length`` tokens from it, the
    first at the start, the last at the end, the rest evenly between (overlapping only
    when the text is shorter than ``count * length`` tokens)."""
    if count < 1 or length < 2:
        raise RangeError(f"windows={count}, window={length}: expected at least 1 window of at least 2 tokens")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < length:
        raise RangeError(f"the text has {len(ids)} tokens, fewer than one window of {length}")
    span = len(ids) - length
    starts = [0] if count == 1 else [round(i * span / (count - 1)) for i in range(count)]
    windows = [ids[s : s + length] for s in starts]
    scored = [len(tokenizer.decode(w[1:]).encode("utf-8")) for w in windows]
    return Windows(windows, starts, scored, len(ids))
