"""``python -m inductor_ext``: the ``inductor-ext`` command."""

import sys

from inductor_ext.cli import main

sys.exit(main())
