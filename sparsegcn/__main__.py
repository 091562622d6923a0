import sys

from sparsegcn.cli import console_main

sys.exit(console_main())
