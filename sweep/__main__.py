import sys

from sweep.cli import main

sys.exit(main())
