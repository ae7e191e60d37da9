"""``python -m streamer.reference config|errors``: a reference page on standard output."""

from __future__ import annotations

import sys

from streamer.reference import config_page, errors_page


def main(argv: list[str]) -> int:
    if argv not in (["config"], ["errors"]):
        print("usage: python -m streamer.reference config|errors > docs/<page>.md", file=sys.stderr)
        return 2
    sys.stdout.write(config_page.page() if argv == ["config"] else errors_page.page())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
