"""`python -m threadlog.cli` runs the command. (The console script and `python -m threadlog`
start in `threadlog.__main__`, which also turns a Ctrl-C while this package loads into exit 130.)"""

from . import main

if __name__ == "__main__":
    main()
