import sys

from infra.app import main

sys.exit(main(sys.argv[1:]))
