import sys

from infra.policy import main

sys.exit(main())
