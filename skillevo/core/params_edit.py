"""Edit params.yaml in place: one `section: key:` scalar at a time, its comments and layout kept, the whole file
checked after (what `make evolve`, `make demo BACKEND=...` and the tests do to a copy of the project's params)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from skillevo.core import config
from skillevo.files import safefs


def set_value(path: str | Path, section_name: str, key: str, value: Any) -> None:
    """Change one `section: key:` scalar in a params file in place, keeping its comments and layout (what
    `make evolve` does to sampling.replicate and simulator.noise), then check the whole file still loads."""
    set_values(path, section_name, {key: value})


def set_values(path: str | Path, section_name: str, values: Mapping[str, Any]) -> None:
    """set_value for several keys of one section at once (`make demo BACKEND=...` switches model.backend and the
    keys that go with it): the file is checked once, when all of them are in."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    for key, value in values.items():
        lines = _set_line(lines, section_name, key, value)
    safefs.write_atomic(path, "\n".join(lines).encode("utf-8"))
    config.load(path)


def _set_line(lines: list[str], section_name: str, key: str, value: Any) -> list[str]:
    rendered = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    try:
        start = lines.index(f"{section_name}:") if f"{section_name}:" in lines else next(
            i for i, line in enumerate(lines) if re.match(rf"{re.escape(section_name)}:\s*(#.*)?$", line))
    except StopIteration:
        return [*lines, f"{section_name}:", f"  {key}: {rendered}"]
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()
                and not lines[i].startswith("#")), len(lines))
    pattern = re.compile(rf"^(\s+){re.escape(key)}:\s*[^#\n]*?(\s*#.*)?$")
    for i in range(start + 1, end):
        match = pattern.match(lines[i])
        if match and len(match.group(1)) == 2:
            comment = match.group(2) or ""
            lines[i] = f"  {key}: {rendered}{comment}"
            return lines
    lines.insert(start + 1, f"  {key}: {rendered}")
    return lines
