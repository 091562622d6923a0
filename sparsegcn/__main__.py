import sys

from sparsegcn.cli import main

sys.exit(main())
