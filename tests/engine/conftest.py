"""Engine tests: run inside the MaxText engine environment (`make engine-check`), never in `make test`.

They load no conftest above this directory (`--confcutdir`): the engine
environment has MaxText and Ray but not the cdktf stack the root conftest
synthesizes. Their helpers are in tests/engine/helpers.py.
"""
