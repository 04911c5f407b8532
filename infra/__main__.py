import sys

from infra.synth.app import main

sys.exit(main(sys.argv[1:]))
