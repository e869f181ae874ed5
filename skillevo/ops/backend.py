"""Switch params.yaml between the offline backends (`make demo BACKEND=...`), keys and all, and say what changed.

    python -m skillevo.ops.backend openai      # OpenAI's path offline: the real LiteLLM proxy, the simulator upstream
    python -m skillevo.ops.backend simulator   # back to the default

Each choice is a whole model section (backend, name, upstream and the keys only another backend reads, reset), so
a switch never leaves a key the next backend refuses; `dvc repro` then re-runs what the model feeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillevo.core import config, layout, params_edit
from skillevo.files.errors import BadInput

OFFLINE: dict[str, dict[str, str | None]] = {
    "simulator": {"backend": "simulator", "name": "claude-sonnet-4-6", "upstream": None},
    "openai": {"backend": "openai", "name": "gpt-5-mini", "upstream": "simulator"},
    "litellm": {"backend": "litellm", "name": "gpt-5-mini", "upstream": "simulator"},
}
RESET: dict[str, str | None] = {"base_url": None, "provider_model": None, "key_env": None, "prices": None}


def switch(choice: str, params: Path = layout.PARAMS) -> str:
    current = config.load(params).model
    wanted = {**OFFLINE[choice], **RESET}
    if all(getattr(current, k) == v for k, v in wanted.items()):
        return f"backend: {params} already runs {choice} offline"
    params_edit.set_values(params, "model", wanted)
    return (f"backend: {params} model.backend {current.backend} -> {wanted['backend']}, model.name {current.name} -> "
            f"{wanted['name']}, model.upstream {current.upstream} -> {wanted['upstream']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m skillevo.ops.backend", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("choice", choices=sorted(OFFLINE))
    p.add_argument("--params", type=Path, default=layout.PARAMS)
    args = p.parse_args(argv)
    try:
        print(switch(args.choice, args.params))
    except BadInput as e:
        print(f"backend: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
