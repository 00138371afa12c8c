"""``python -m semel.protocol.codegen [--out DIR]``: regenerate ``protocol/messages/``.

Reads the pinned spec sources (see ``protocol.codegen.specs``) and writes one module per
request and response listed in ``protocol.api.APIS``, for exactly the versions in that table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from semel.protocol.api import APIS, snake
from semel.protocol.codegen.generator import Emitter, MessageModel
from semel.protocol.codegen.specs import REPO_ROOT, SpecSource, SpecSourceMissing

INIT = '"""Generated Kafka message codecs (``python -m semel.protocol.codegen``). Do not edit."""\n'


def generate_all(out_dir: Path, unavailable: list[str] | None = None) -> list[Path]:
    """Write every module; the paths written. With ``unavailable`` (a list), a message whose
    spec source is missing (the Kafka sources, on a machine without them) is skipped and its
    name appended there instead of failing the whole run."""
    source = SpecSource()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "__init__.py"]
    written[0].write_text(INIT)
    for api in APIS:
        versions = list(range(api.min_version, api.max_version + 1))
        for kind in ("request", "response"):
            try:
                spec, origin = source.load(f"{api.name}{kind.capitalize()}")
            except SpecSourceMissing:
                if unavailable is None:
                    raise
                unavailable.append(f"{snake(api.name)}_{kind}.py")
                continue
            model = MessageModel(spec)
            missing = [v for v in versions if v not in model.valid]
            if missing:
                raise SystemExit(f"{model.name}: versions {missing} not in the spec ({origin})")
            path = out_dir / f"{snake(api.name)}_{kind}.py"
            path.write_text(Emitter(model, versions).generate(origin))
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m semel.protocol.codegen")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "protocol" / "messages")
    args = parser.parse_args(argv)
    try:
        written = generate_all(args.out)
    except SpecSourceMissing as e:
        print(f"codegen: spec source missing: {e}", file=sys.stderr)
        return 2
    print(f"codegen: wrote {len(written)} modules to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
