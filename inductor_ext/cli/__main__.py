import sys

from inductor_ext.cli import main

sys.exit(main())
