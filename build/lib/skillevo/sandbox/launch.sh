#!/bin/bash
# The first process of every sandbox (bwrap's init starts it): ties the sandbox's life to the host process that
# started it, starts the loopback end of the model relay when there is one, runs the command, and leaves nothing
# behind. Inside a PID namespace `kill -KILL -1` reaches every process of the sandbox but init and the caller.
#
# The lifeline: SKILLEVO_LIFELINE_FD is the read end of a pipe whose only write end the host process holds and
# never writes to, so the pipe reads as end-of-file exactly when that process is gone, however it died (kill -9
# included). bwrap's --die-with-parent alone leaves a window: a host killed while bwrap sets the sandbox up,
# before bwrap's own prctl, leaves the sandbox running on for as long as its command does.
set -u
fd=${SKILLEVO_LIFELINE_FD:-}
if [ -n "$fd" ]; then
  # readable with nothing ever written = end-of-file: the host died before the command could start
  if read -r -t 0 <&"$fd"; then exit 137; fi
  { cat <&"$fd" >/dev/null 2>&1; kill -KILL -1; } &
  disown  # not a job of this shell: its death at the end is reported nowhere (the checks keep stderr)
  exec {fd}<&-
fi
if [ -n "${SKILLEVO_RELAY_PORT:-}" ]; then
  socat "TCP-LISTEN:${SKILLEVO_RELAY_PORT},bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:/run/skillevo/relay.sock" &
  disown
  for _ in $(seq 500); do
    (exec 3<>"/dev/tcp/127.0.0.1/${SKILLEVO_RELAY_PORT}") 2>/dev/null && break
    sleep 0.01
  done
fi
"$@"
status=$?
# the guard, the relay's socat and whatever the command left running: bwrap's init waits for every process, so
# one left behind would hold the sandbox open until the host's deadline
kill -KILL -1 2>/dev/null
exit "$status"
