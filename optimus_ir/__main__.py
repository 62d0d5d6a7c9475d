import sys

from optimus_ir.cli import main

sys.exit(main())
