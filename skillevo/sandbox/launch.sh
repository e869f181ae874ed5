#!/bin/bash
# Runs inside the sandbox as the first process: start the loopback end of the model relay, wait until
# it accepts connections, then become the command. SKILLEVO_RELAY_PORT is the port the CLI is told.
set -u
if [ -n "${SKILLEVO_RELAY_PORT:-}" ]; then
  socat "TCP-LISTEN:${SKILLEVO_RELAY_PORT},bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:/run/skillevo/relay.sock" &
  for _ in $(seq 500); do
    (exec 3<>"/dev/tcp/127.0.0.1/${SKILLEVO_RELAY_PORT}") 2>/dev/null && break
    sleep 0.01
  done
fi
exec "$@"
