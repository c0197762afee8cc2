#!/usr/bin/env bash
# mpirun with the flags kiln's tests need on one machine: more ranks than cores, and root in
# containers.
extra=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
exec mpirun "${extra[@]}" "$@"
