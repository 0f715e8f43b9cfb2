"""``python -m tfplace``: the ``tfplace`` command (:mod:`tfplace.cli`)."""

from tfplace.cli import run

if __name__ == "__main__":
    run()
