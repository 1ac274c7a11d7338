# Sourced by the set-up scripts. `apt_install PKG...`: Debian's packages, one apt at a time. `make -j` runs the
# set-up scripts side by side (.ci/run), and dpkg and apt's lists take one client at a time: a second apt-get
# fails at once on their locks, so every script waits for this one lock instead.
apt_install() {
  flock /var/lock/imagebuilder-apt.lock bash -c 'apt-get update -q >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null' apt_install "$@"
}
