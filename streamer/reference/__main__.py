"""``python -m streamer.reference config|errors``: a reference page on standard output."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv not in (["config"], ["errors"]):
        print("usage: python -m streamer.reference config|errors > docs/<page>.md", file=sys.stderr)
        return 2
    if argv == ["config"]:
        from streamer.reference.config_page import page
    else:
        from streamer.reference.errors_page import page
    sys.stdout.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
