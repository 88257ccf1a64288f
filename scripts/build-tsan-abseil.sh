#!/usr/bin/env bash
# Builds Abseil, the very version and Debian patches of the installed libabsl-dev (from
# Debian's source package), as shared libraries instrumented with ThreadSanitizer, into PREFIX
# (default build-tsan/abseil). `make test-tsan` links against it and loads it in place of
# Debian's copy (rpath), in our code and in gRPC alike: absl::Mutex, CondVar, Notification and
# call_once then tell TSan about the synchronization they do, which Debian's uninstrumented
# copy hides (TSan would report every access guarded by an absl::Mutex as a race).
#   scripts/build-tsan-abseil.sh [PREFIX]
# scripts/abseil-tsan-mutex.patch fixes the one TSan annotation of this Abseil that is wrong
# (see the patch). Does nothing when PREFIX already holds a build of the installed version
# with this patch. The source comes through apt with a private sources list and state
# directory: the machine's apt configuration is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath -m "${1:-build-tsan/abseil}")
patch_file=$PWD/scripts/abseil-tsan-mutex.patch
version="$(dpkg-query -W -f='${Version}' libabsl-dev) $(sha256sum <"$patch_file" | cut -c1-16)"
if [[ -f $prefix/.version && $(cat "$prefix/.version") == "$version" ]]; then
  exit 0
fi
jobs=${JOBS:-$(nproc)}
work="$prefix.work"
rm -rf "$work" "$prefix"
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
cat >"$work/apt/sources.list" <<SOURCES
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
SOURCES
apt_options=(
  -o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache"
  -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)"
)
debian_version=${version%% *}
echo "build-tsan-abseil: fetching Debian's abseil $debian_version"
(cd "$work" && apt-get "${apt_options[@]}" -qq update &&
  apt-get "${apt_options[@]}" -qq source "abseil=$debian_version" >/dev/null)
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'abseil-*' | head -1)
[[ -n $src ]] || { echo "build-tsan-abseil: no source in $work" >&2; exit 1; }
patch -d "$src" -p1 --quiet <"$patch_file"

# As debian/rules builds the shared libraries (C++17), plus TSan.
echo "build-tsan-abseil: building into $prefix (TSan, -j$jobs)"
CC=clang-14 CXX=clang++-14 cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
  -DCMAKE_C_FLAGS="-fsanitize=thread" -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib >"$work/configure.log"
cmake --build "$work/build" -j"$jobs" >"$work/build.log"
cmake --install "$work/build" >/dev/null
echo "$version" >"$prefix/.version"
rm -rf "$work"
echo "build-tsan-abseil: done"
