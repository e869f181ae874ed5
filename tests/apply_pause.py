"""The apply stage as a process that stops at one fault point, so a test can signal or kill it there.

    python -m tests.apply_pause <event>:<index> <stage args...>

At that point it prints "apply: test pause at <event> <index>" to stderr and sleeps; otherwise it is
`python -m skillevo.stages.apply <stage args...>`.
"""

from __future__ import annotations

import functools
import sys
import time

from skillevo.apply import Fault
from skillevo.core import stage
from skillevo.stages import apply as apply_stage


def pause_at(spec: str) -> Fault:
    event, _, index = spec.partition(":")

    def pause(at: str, i: int, path: str | None) -> None:
        if at == event and str(i) == index:
            print(f"apply: test pause at {at} {i}", file=sys.stderr, flush=True)
            time.sleep(30)

    return pause


def main(argv: list[str]) -> int:
    spec, *args = argv
    return stage.main("apply", apply_stage.parser(), functools.partial(apply_stage.run, fault=pause_at(spec)), args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
