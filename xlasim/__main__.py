import sys

from xlasim.cli import main  # absolute: worker processes import the launching script by path

if __name__ == "__main__":  # and then its name is __mp_main__: only the launcher runs the CLI
    sys.exit(main())
