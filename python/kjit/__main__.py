"""`python -m kjit COMMAND ...`: the kjit command line (info, compile, warm, export, prefetch, ls, verify,
prune, clear), the same as the C++ `kjit` binary, plus `demo`."""

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "demo":
        from kjit.demo import main as demo_main

        return demo_main(args[1:]) or 0
    from kjit import _core

    sys.stdout.flush()
    sys.stderr.flush()
    return _core.cli_run(args)


if __name__ == "__main__":
    sys.exit(main())
