import sys

from qemu_tests.harness import main

sys.exit(main())
