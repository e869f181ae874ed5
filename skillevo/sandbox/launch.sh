#!/bin/bash
# Runs inside the sandbox as the first process: start the loopback end of the model relay, wait until
# it accepts connections, then run the command. SKILLEVO_RELAY_PORT is the port the CLI is told.
# The relay end must not outlive the command: the namespace's init waits for every child, so a socat
# left behind would keep the whole sandbox alive if its host process were killed.
set -u
if [ -n "${SKILLEVO_RELAY_PORT:-}" ]; then
  socat "TCP-LISTEN:${SKILLEVO_RELAY_PORT},bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:/run/skillevo/relay.sock" &
  relay=$!
  trap 'kill "$relay" 2>/dev/null' EXIT
  for _ in $(seq 500); do
    (exec 3<>"/dev/tcp/127.0.0.1/${SKILLEVO_RELAY_PORT}") 2>/dev/null && break
    sleep 0.01
  done
  "$@"
  exit $?
fi
exec "$@"
