"""Generate (or check) the Python code for the .proto files under proto/.

    python proto/generate.py          # write generated code into libs/common/src/cairn/proto
    python proto/generate.py --check  # exit 1 if regenerating would change anything

The generated code is committed so that installing Cairn needs no protoc; the
check keeps it honest.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT_PACKAGE = ROOT / "libs" / "common" / "src" / "cairn" / "proto"
INIT_TEXT = '"""Generated protocol code. Do not edit: run `python proto/generate.py`."""\n'


def generate_into(out_root: Path) -> None:
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    (out_root / "cairn" / "proto" / "__init__.py").write_text(INIT_TEXT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out_root = Path(tmp)
        generate_into(out_root)
        fresh = out_root / "cairn" / "proto"
        fresh_files = {p.name for p in fresh.iterdir() if p.is_file()}
        if args.check:
            current = (
                {p.name for p in OUT_PACKAGE.iterdir() if p.is_file()}
                if OUT_PACKAGE.exists()
                else set()
            )
            stale = sorted(
                name
                for name in fresh_files | current
                if name not in fresh_files
                or name not in current
                or not filecmp.cmp(fresh / name, OUT_PACKAGE / name, shallow=False)
            )
            if stale:
                print("generated protocol code is stale: " + ", ".join(stale), file=sys.stderr)
                print("run: python proto/generate.py", file=sys.stderr)
                return 1
            print("generated protocol code is up to date")
            return 0
        if OUT_PACKAGE.exists():
            shutil.rmtree(OUT_PACKAGE)
        shutil.copytree(fresh, OUT_PACKAGE)
        print(f"wrote {len(fresh_files)} files to {OUT_PACKAGE.relative_to(ROOT)}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
