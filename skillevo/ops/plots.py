"""`make plots`: the page `dvc plots show` writes, readable offline.

DVC's page loads Vega from a CDN, so it is blank on an air-gapped machine or in a sandbox. Here the same
libraries (the versions dvc-render targets, installed from npm by `make plots`) are inlined into an HTML
template that DVC fills, so the page needs no network at all.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from skillevo.core import layout, stage
from skillevo.files import errors, safefs

# what dvc_render.vega loads from the CDN, in load order
LIBRARIES = ("vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js", "vega-embed/build/vega-embed.min.js")
OUT = layout.RESULTS / "plots"


def template(node_modules: Path) -> str:
    scripts = []
    for rel in LIBRARIES:
        path = node_modules / rel
        try:
            code = path.read_text(encoding="utf-8")
        except OSError as e:
            raise errors.BrokenEnvironment(
                f"{path}: cannot read ({e.strerror}); run `make plots`, which installs it") from e
        code = code.replace("</script", "<\\/script")  # a literal in the code must not end the element
        scripts.append(f"<script>/* {rel} */\n{code}\n</script>")
    return ("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>skillevo plots</title>\n"
            + "\n".join(scripts) + "\n</head>\n<body>\n{plot_divs}\n</body>\n</html>\n")


def render(node_modules: Path, out: Path, dvc: str = "dvc") -> Path:
    with tempfile.TemporaryDirectory(prefix="skillevo-plots-") as tmp:
        page = Path(tmp) / "template.html"
        safefs.write_atomic(page, template(node_modules).encode("utf-8"))
        done = subprocess.run([dvc, "plots", "show", "--html-template", str(page), "-o", str(out)],
                              capture_output=True, text=True)
    if done.returncode:
        raise errors.BadInput(f"dvc plots show failed: {done.stderr.strip() or done.stdout.strip()}")
    index = out / "index.html"
    if "cdn." in index.read_text(encoding="utf-8"):
        raise errors.BadInput(f"{index}: still loads a script from a CDN (rule: plots work offline)")
    return index


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.ops.plots", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--node-modules", type=Path, required=True, help="where vega, vega-lite and vega-embed are")
    p.add_argument("--dvc", default="dvc", help="[%(default)s]")
    p.add_argument("--out", type=Path, default=OUT, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    return f"plots: {render(args.node_modules, args.out, args.dvc)} (Vega inlined: no network needed)"


if __name__ == "__main__":
    sys.exit(stage.main("plots", parser(), run))
