#!/usr/bin/env bash
# Fetch the Nsight Systems CLI into the project's .tools/ folder when no `nsys` is available.
#
# Debian ships Nsight Systems in its non-free archive (nsight-systems-target: the `nsys` CLI
# and target libraries; nsight-systems: the host side, of which we need QdstrmImporter, which
# turns a capture into a report and exports SQLite). This script downloads the packages with a
# private apt configuration (its own sources list, package lists and cache under a temporary
# folder), so the machine's apt sources are never changed, and unpacks them with `dpkg -x`.
# QdstrmImporter needs libssh (libssh-4 from the distribution's main archive), also unpacked
# privately. The result is .tools/nsight-systems-<version>/ and a wrapper .tools/bin/nsys.
#
# Usage: scripts/install_nsys.sh            (idempotent; exits 0 quickly when present)
# Environment: NSYS_DEBIAN_SUITE (default trixie: nsys 2023.4.4; bookworm has 2022.4.2 target only)
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$HERE/.tools"
SUITE="${NSYS_DEBIAN_SUITE:-trixie}"
say() { printf '[install_nsys] %s\n' "$*"; }

if [[ -x "$TOOLS/bin/nsys" ]] && "$TOOLS/bin/nsys" --version >/dev/null 2>&1; then
  say "present: $("$TOOLS/bin/nsys" --version)"; exit 0
fi
if command -v nsys >/dev/null 2>&1; then say "using nsys on PATH: $(command -v nsys)"; exit 0; fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  say "no nsys and no apt-get/dpkg here: install Nsight Systems from NVIDIA"
  say "  (https://developer.nvidia.com/nsight-systems) and put nsys on PATH or set SCALESCOPE_NSYS."
  exit 0
fi

WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/debs"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$WORK/sources.list" <<SRC
deb [signed-by=$KEYRING] http://deb.debian.org/debian $SUITE non-free
deb [signed-by=$KEYRING] http://deb.debian.org/debian $SUITE main
SRC
APT=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/cache" -o Debug::NoLocking=1
     -o APT::Sandbox::User=root)
say "fetching package lists for Debian $SUITE (private apt configuration)"
if ! apt-get "${APT[@]}" update -qq >/dev/null 2>&1; then
  say "WARNING: could not reach Debian's archive; nsys tests will be skipped"; exit 0
fi
cd "$WORK/debs" || exit 0
if ! apt-get "${APT[@]}" download nsight-systems-target nsight-systems libssh-4 >/dev/null 2>&1; then
  say "WARNING: could not download nsight-systems from Debian $SUITE non-free; nsys tests will be skipped"; exit 0
fi
VER="$(dpkg-deb -f nsight-systems-target_*.deb Version | sed 's/~.*//')"
DEST="$TOOLS/nsight-systems-$VER"
rm -rf "$DEST" && mkdir -p "$DEST/lib" "$TOOLS/bin"
for d in *.deb; do dpkg -x "$d" "$WORK/root"; done
cp -a "$WORK/root/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$DEST/"
cp -a "$WORK/root/usr/lib/nsight-systems/host-linux-x64" "$DEST/"
cp -a "$WORK/root/usr/lib/x86_64-linux-gnu/"libssh.so.4* "$DEST/lib/"
ln -sf libssh.so.4 "$DEST/lib/libssh.so"   # QdstrmImporter's libraries ask for the unversioned name
cat >"$TOOLS/bin/nsys" <<WRAP
#!/usr/bin/env bash
# Nsight Systems $VER from Debian $SUITE non-free, unpacked by scripts/install_nsys.sh
export LD_LIBRARY_PATH="$DEST/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$DEST/target-linux-x64/nsys" "\$@"
WRAP
chmod +x "$TOOLS/bin/nsys"
if "$TOOLS/bin/nsys" --version >/dev/null 2>&1; then
  say "installed: $("$TOOLS/bin/nsys" --version) -> $TOOLS/bin/nsys"
else
  say "WARNING: the unpacked nsys does not run; nsys tests will be skipped"; rm -f "$TOOLS/bin/nsys"
fi
exit 0
