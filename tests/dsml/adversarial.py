"""Inputs built to make a naive grader slow (shared by the linear-time test and the bench)."""

from __future__ import annotations

import random
from collections.abc import Callable

from exporter.dsml import markers as m

B = m.BAR


def _random_unicode(n: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    pool = "aé的ж<>`|｜\"' \n—.,Ġ\ufffd" + B + "DSML"
    return "".join(rng.choice(pool) for _ in range(n))


def _near_loop(n: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < n:
        piece = "abcdefghijklm" + rng.choice("xyz")
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


# name -> builder(size in characters) -> text
SHAPES: dict[str, Callable[[int], str]] = {
    "repeated invoke openers": _repeat(f'<{B}DSML{B}invoke name="'),
    "unclosed parameters": _repeat(f'<{B}DSML{B}parameter name="a" string="true">x'),
    "block opener then closers": lambda n: (
        f"<{B}DSML{B}tool_calls>\n" + _repeat(f"</{B}DSML{B}invoke>\n")(n)
    ),
    "damaged markers": _repeat(f"{B}DSML{B}toolcall "),
    "doubled bars": _repeat(f"<{B}{B}DSML{B}{B}"),
    "special-token shapes": _repeat(f"<{B}User{B}><{B}"),
    "ascii pipes": _repeat("<|DSML|invoke <|"),
    "angle soup": _repeat("<<<</"),
    "backtick soup": _repeat("`a``b"),
    "fence lines": _repeat("\n```x"),
    "think tags": _repeat("</think><think>"),
    "near-periodic text": _near_loop,
    "table rules": _repeat("|---"),
    "script salad": _repeat("data данные 数据 데이터 "),
    "random unicode": _random_unicode,
}
