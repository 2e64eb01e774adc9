import sys

from fedsheaf.cli import main

sys.exit(main())
