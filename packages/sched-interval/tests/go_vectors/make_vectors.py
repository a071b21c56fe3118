"""Regenerate ``vectors.json``: Go's own answers for the inputs built here.

Run from this folder with a Go toolchain on PATH: ``python make_vectors.py``.
The inputs are deterministic (a seeded ``random.Random``), so a run with the
same Go version reproduces the file byte for byte. The tests never need Go.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent

HAND = [
    "1h30m",
    "1.5h",
    ".5s",
    "5.s",
    "+5s",
    "-1.5h",
    "1µs",
    "1μs",
    "1us",
    "1ns",
    "1ms",
    "9223372036854775807ns",
    "9223372036854775808ns",
    "-9223372036854775808ns",
    "-9223372036854775809ns",
    "2562047h47m16.854775807s",
    "2562047h47m16.854775808s",
    "-2562047h47m16.854775808s",
    "-2562047h47m16.854775809s",
    "2562048h",
    "2562047h",
    "1",
    "1H",
    "1 h",
    "1d",
    ".",
    "",
    "0",
    "0s",
    "-0",
    "+0",
    "0h0m",
    "00",
    "-",
    "+",
    "-.s",
    ".s",
    "1.s",
    "1..5s",
    "1.5.s",
    "banana",
    "1h-1m",
    "1h 1m",
    " 1h",
    "1h ",
    "1e3s",
    "0x10s",
    "1_000s",
    "\u0661s",  # ARABIC-INDIC DIGIT ONE
    "\uff11s",  # FULLWIDTH DIGIT ONE
    "1\u00b5",
    "1\u03bc",
    "1µ s",
    '"1\\h"',
    "1\t",
    "1\x00s",
    "1\x7fs",
    "1\ufffds",
    "1\ufffd",
    "9223372036854775808ns9223372036854775808ns",
    "-9223372036854775808ns9223372036854775808ns",
    "9223372036854775808ns1s",
    "4611686018427387904ns4611686018427387904ns",
    "18446744073709551616ns",
    "99999999999999999999ns",
    "0000000000000000000000000001s",
    "1.0000000000000000000000001h",
    "0.1234567890123456789012345678901234567890h",
    "1.9999999999999999999999s",
    ".000000000000000000000000000000000000000000001h",
    "0.3333333333333333333333333h",
    "1.1ns",
    "0.5ns",
    "0.9999999999ns",
    "2.5us",
    "1.0000001h",
    "0.1h",
    "0.7h",
    "3.000000001s",
    "5.55555555555555555h",
    "2562047.788015215h",
    "153722867.280912930m",
    "9223372036.854775807s",
    "9223372036.854775808s",
    "9223372036854775.807us",
    "922337203685477580.7ns",
    "922337203685477580.8ns",
    "9223372036854775807.0ns",
    "-9223372036854775808.0ns",
    "-9223372036854775808.1ns",
    "1h1h1h",
    "0.9223372036854775809s",
    "0.9223372036854775808s",
    "0.92233720368547758089h",
    ".9223372036854775807999h",
    "1m60s",
]


def _random_text(rng: random.Random) -> str:
    alphabet = "0123456789" * 3 + ".." + "+-" + "nsumh" * 2 + "µμ" + ' \tHSd\x1c"\\é\udcff'
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))


def _random_number(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        whole = str(rng.randint(0, 10 ** rng.randint(0, 20)))
    elif kind < 0.4:
        whole = ""
    else:
        whole = str(rng.randint(0, 100_000))
    if rng.random() < 0.5:
        frac_len = rng.choice([0, 1, 2, 3, 6, 9, 12, 17, 18, 19, 20, 25, 40])
        zeros = "0" * rng.choice([0, 0, 0, 1, 5, 20, 30])
        frac = zeros + "".join(rng.choice("0123456789") for _ in range(frac_len))
        return f"{whole}.{frac}" if whole or frac else "1.5"
    return whole or "7"


def _random_duration(rng: random.Random) -> str:
    units = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
    parts = [_random_number(rng) + rng.choice(units) for _ in range(rng.randint(1, 4))]
    sign = rng.choice(["", "", "", "-", "+"])
    return sign + "".join(parts)


def _boundary_durations() -> list[str]:
    out = []
    limit = 1 << 63
    for unit, size in [
        ("ns", 1),
        ("us", 10**3),
        ("ms", 10**6),
        ("s", 10**9),
        ("m", 60 * 10**9),
        ("h", 3600 * 10**9),
    ]:
        top = limit // size
        for whole in (top - 1, top, top + 1):
            for frac in ("", ".5", ".9999999999999", ".0000000001", ".999999999999999999999"):
                for sign in ("", "-"):
                    out.append(f"{sign}{whole}{frac}{unit}")
    return out


def _format_inputs(rng: random.Random) -> list[int]:
    fixed = [
        0,
        1,
        -1,
        999,
        1000,
        1001,
        1500,
        999_999,
        1_000_000,
        1_500_000,
        999_999_999,
        10**9,
        1_500_000_000,
        60 * 10**9,
        3600 * 10**9,
        5_400_000_000_000,
        (1 << 63) - 1,
        -(1 << 63),
        -(1 << 63) + 1,
        -1500,
        -90 * 10**9,
    ]
    randoms = [rng.randint(-(1 << 63), (1 << 63) - 1) for _ in range(200)]
    scaled = [rng.choice([-1, 1]) * rng.randint(0, 10 ** rng.randint(0, 18)) for _ in range(300)]
    return fixed + randoms + scaled


def main() -> None:
    rng = random.Random(20261202)
    texts = list(HAND) + _boundary_durations()
    texts += [_random_duration(rng) for _ in range(1500)]
    texts += [_random_text(rng) for _ in range(700)]
    encoded = [base64.b64encode(t.encode("utf-8", "surrogateescape")).decode() for t in texts]
    request = json.dumps({"parse": encoded, "format": _format_inputs(rng)})
    result = subprocess.run(
        ["go", "run", "main.go"],
        input=request,
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
    )
    answer = json.loads(result.stdout)
    # One entry a line, so a regenerated file diffs readably.
    lines = ["{", f'"go": {json.dumps(answer["go"])},', f'"space": {json.dumps(answer["space"])},']
    for key in ("format", "parse"):
        entries = [json.dumps(e, sort_keys=True) for e in answer[key]]
        lines.append(f'"{key}": [')
        lines.append(",\n".join(entries))
        lines.append("]," if key == "format" else "]")
    lines.append("}")
    (HERE / "vectors.json").write_text("\n".join(lines) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
