"""``python -m car_rag``: the car-rag command line."""

import sys

from car_rag.cli import main

if __name__ == "__main__":
    sys.exit(main())
