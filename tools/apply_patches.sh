#!/usr/bin/env bash
# Bring every upstream checkout to its pin and apply its patch series (see tools/patches).
exec "$(dirname "$0")/patches" apply "$@"
