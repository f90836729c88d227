import sys

from bench.jobs import main

sys.exit(main())
