#!/bin/sh
# imagebuilder: create the non-root user an image runs as (matrix `user:`), with a writable home and
# workdir. Run as root in the root layer:  add_user.sh NAME UID GID HOME WORKDIR
# Works with shadow's useradd/groupadd (Debian, Ubuntu) and without them (it then writes /etc/passwd).
set -eu
name=$1 uid=$2 gid=$3 home=$4 workdir=$5
fail() { echo "imagebuilder: user: $*" >&2; exit 1; }

group=$(getent group "$gid" | cut -d: -f1 || true)
if [ -z "$group" ]; then
  getent group "$name" >/dev/null && fail "group $name exists with another GID than $gid; set user.gid to its GID"
  if command -v groupadd >/dev/null 2>&1; then groupadd --gid "$gid" "$name"; else echo "$name:x:$gid:" >>/etc/group; fi
fi

by_uid=$(getent passwd "$uid" | cut -d: -f1 || true)
if [ -n "$by_uid" ] && [ "$by_uid" != "$name" ]; then
  fail "UID $uid is already the base image's user '$by_uid'; set user.name: $by_uid, or another user.uid"
fi
if [ -z "$by_uid" ]; then
  getent passwd "$name" >/dev/null && fail "user $name exists with another UID than $uid; set user.uid to its UID"
  shell=/bin/sh
  [ -x /bin/bash ] && shell=/bin/bash
  if command -v useradd >/dev/null 2>&1; then
    # --no-log-init: a large UID would otherwise grow a sparse /var/log/lastlog into the layer
    useradd --uid "$uid" --gid "$gid" --home-dir "$home" --no-create-home --no-log-init --shell "$shell" "$name"
  else
    echo "$name:x:$uid:$gid::$home:$shell" >>/etc/passwd
  fi
fi
mkdir -p "$home" "$workdir"
chown "$uid:$gid" "$home" "$workdir"
chmod 0755 "$home" "$workdir"
