#!/bin/sh
# The verification the work skill runs: the named tests, quietly, without writing a pytest cache.
echo "work/check.sh: verifying $*"
exec python3 -m pytest -q -p no:cacheprovider "$@"
